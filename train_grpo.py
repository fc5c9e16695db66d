"""GRPO training of tool-calling language models on CarlaTrolley-v0 (not implemented yet).

TRL GRPO training with environment_factory arrives in a later release; see the README.
"""

import sys

if __name__ == "__main__":
    print("train_grpo.py: GRPO training of tool-calling LLMs comes in a later release; "
          "use train_sb3.py for PPO today.", file=sys.stderr)
    sys.exit(2)
