"""The rhyme example on Modal GPUs: slime GRPO, Qwen3-4B, 16 prompts x 8 samples a step
(the reference run's shape). Same prompts and reward as config.py.

    crucible train launch examples/train/rhyme/config_modal.py --dry-run   # the plan
    crucible train smoke examples/train/rhyme/config_modal.py              # CPU, tiny model
"""

from config import config as local  # config.py beside this file

from crucible.train.modal_recipe import ModalRecipe

config = local.model_copy(update={
    "name": "rhyme-modal",
    "model": "Qwen/Qwen3-4B",
    "recipe": ModalRecipe(trainer="slime", gpu="H100", gpus=8, algorithm="grpo"),
    "steps": 100,
    "batch_size": 16,
    "samples_per_prompt": 8,
    "max_response_length": 256,
    "save_interval": 20,
})  # fmt: skip
