import sys

from example_trainer.demo.pipeline import main

sys.exit(main())
