import sys

from tsrnn.lab.cli import main

sys.exit(main())
