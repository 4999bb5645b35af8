import sys

from example_trainer.grpo.main import main

sys.exit(main())
