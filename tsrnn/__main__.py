import sys

from tsrnn.cli import main

sys.exit(main())
