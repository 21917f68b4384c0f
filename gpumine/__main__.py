"""``python -m gpumine``: the same command line as the ``gpumine`` script."""

from gpumine.cli.app import main

if __name__ == "__main__":
    main()
