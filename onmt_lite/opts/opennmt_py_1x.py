"""The option names of OpenNMT-py 1.x's commands, for matching abbreviations (see parser.py).

A copy of docs/opennmt_py_1x_options.txt (OpenNMT-py 1.2.0, the last 1.x release), in file order:
tests/unit/test_opts.py fails when the two differ. The docs file is the source; it is not installed
with the package, this module is.
"""

OPENNMT_PY_1X_OPTIONS = {
    "preprocess": tuple("""
        config save_config data_type train_src train_tgt train_align train_ids valid_src valid_tgt
        valid_align src_dir save_data max_shard_size shard_size num_threads overwrite src_vocab tgt_vocab
        features_vocabs_prefix src_vocab_size tgt_vocab_size vocab_size_multiple src_words_min_frequency
        tgt_words_min_frequency dynamic_dict share_vocab src_seq_length src_seq_length_trunc tgt_seq_length
        tgt_seq_length_trunc lower filter_valid shuffle seed report_every log_file log_file_level
        sample_rate window_size window_stride window image_channel_size subword_prefix
        subword_prefix_is_joiner
    """.split()),
    "train": tuple("""
        config save_config src_word_vec_size tgt_word_vec_size word_vec_size share_decoder_embeddings
        share_embeddings position_encoding feat_merge feat_vec_size feat_vec_exponent model_type model_dtype
        encoder_type decoder_type layers enc_layers dec_layers rnn_size enc_rnn_size dec_rnn_size
        audio_enc_pooling cnn_kernel_width input_feed bridge rnn_type brnn context_gate bridge_extra_node
        bidir_edges state_dim n_edge_types n_node n_steps src_vocab global_attention
        global_attention_function self_attn_type max_relative_positions heads transformer_ff aan_useffn
        lambda_align alignment_layer alignment_heads full_context_alignment copy_attn copy_attn_type
        generator_function copy_attn_force reuse_copy_attn copy_loss_by_seqlength coverage_attn
        lambda_coverage loss_scale apex_opt_level data data_ids data_weights data_to_noise save_model
        save_checkpoint_steps keep_checkpoint gpuid gpu_ranks world_size gpu_backend gpu_verbose_level
        master_ip master_port queue_size seed param_init param_init_glorot train_from reset_optim
        pre_word_vecs_enc pre_word_vecs_dec fix_word_vecs_enc fix_word_vecs_dec batch_size
        batch_size_multiple batch_type pool_factor normalization accum_count accum_steps valid_steps
        valid_batch_size max_generator_batches train_steps single_pass epochs early_stopping
        early_stopping_criteria optim adagrad_accumulator_init max_grad_norm dropout attention_dropout
        dropout_steps truncated_decoder adam_beta1 adam_beta2 label_smoothing average_decay average_every
        src_noise src_noise_prob learning_rate learning_rate_decay start_decay_steps decay_steps
        decay_method warmup_steps report_every log_file log_file_level exp_host exp tensorboard
        tensorboard_log_dir sample_rate window_size image_channel_size
    """.split()),
    "translate": tuple("""
        config save_config model fp32 avg_raw_probs data_type src src_dir tgt tgt_prefix shard_size output
        report_align report_time dynamic_dict share_vocab random_sampling_topk random_sampling_temp seed
        beam_size min_length max_length max_sent_length stepwise_penalty length_penalty ratio
        coverage_penalty alpha beta block_ngram_repeat ignore_when_blocking replace_unk phrase_table verbose
        log_file log_file_level attn_debug align_debug dump_beam n_best batch_size batch_type gpu
        sample_rate window_size window_stride window image_channel_size
    """.split()),
}
