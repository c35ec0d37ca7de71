import sys

from mpiflow.launch import main

sys.exit(main())
