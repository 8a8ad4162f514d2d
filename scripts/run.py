"""``python -m scripts.run`` (checkout only): the ``icml26`` command, see :mod:`common.cli`."""

from common.cli import main

if __name__ == "__main__":
    main()
