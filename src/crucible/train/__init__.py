"""Training runs on existing trainers: datasets, rewards, configs, recipes (TRL here, slime/verl on Modal)."""

from crucible.train.config import TrainConfig, load_config
from crucible.train.dataset import Dataset, HFDataset, JSONLDataset, Row, TaskSetDataset
from crucible.train.recipe import GPUSpec, LaunchPlan, Recipe, VolumeSpec
from crucible.train.reward import GraderReward, Sample
from crucible.train.trl_recipe import TRLGRPORecipe

__all__ = ["Dataset", "GPUSpec", "GraderReward", "HFDataset", "JSONLDataset", "LaunchPlan",
           "Recipe", "Row", "Sample", "TRLGRPORecipe", "TaskSetDataset", "TrainConfig",
           "VolumeSpec", "load_config"]  # fmt: skip
