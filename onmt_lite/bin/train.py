"""onmt_lite_train: not available yet in this version of onmt_lite."""
import sys

PROG = "onmt_lite_train"


def main(args=None):
    print(f"{PROG}: error: this version of onmt_lite does not have train yet (see the README's status)",
          file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
