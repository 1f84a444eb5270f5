"""The papers grove's components implement: one constant per paper, cited by the registry entries.

Each constant is ``"Title (First author et al., year)"``, the title as the paper gives it. Registry
entries take them as ``paper=`` (several joined with ``"; "``), and ``scripts/docs_tables.py`` prints
them in the generated tables of ``docs/algorithms.md``.
"""

from __future__ import annotations

# advantage estimators
GRPO = "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models (Shao et al., 2024)"
DR_GRPO = "Understanding R1-Zero-Like Training: A Critical Perspective (Liu et al., 2025)"
RLOO = (
    "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs "
    "(Ahmadian et al., 2024)"
)
LITE_PPO = "Part I: Tricks or Traps? A Deep Dive into RL for LLM Reasoning (Liu et al., 2025)"
GPG = "GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning (Chu et al., 2025)"
OPO = "On-Policy RL with Optimal Reward Baseline (Hao et al., 2025)"
REINFORCE_PP = "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models (Hu et al., 2025)"
REMAX = (
    "ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for Aligning Large Language Models "
    "(Li et al., 2023)"
)
PASSK_TANG = "Optimizing Language Models for Inference Time Objectives using Reinforcement Learning (Tang et al., 2025)"
PASSK_CHEN = (
    "Pass@k Training for Adaptively Balancing Exploration and Exploitation of Large Reasoning Models "
    "(Chen et al., 2025)"
)
BNPO = "BNPO: Beta Normalization Policy Optimization (Xiao et al., 2025)"
GDPO = (
    "GDPO: Group reward-Decoupled Normalization Policy Optimization for Multi-reward RL Optimization "
    "(Liu et al., 2026)"
)
MO_GRPO = (
    "MO-GRPO: Mitigating Reward Hacking of Group Relative Policy Optimization on Multi-Objective Problems "
    "(Ichihara et al., 2025)"
)
CRPO = (
    "Clinical-R1: Empowering Large Language Models for Faithful and Comprehensive Reasoning with Clinical "
    "Objective Relative Policy Optimization (2025)"
)
SEARCHLLM = "Aligning Large Language Models with Searcher Preferences (SearchLLM, 2025)"
RM_ENSEMBLES = "Reward Model Ensembles Help Mitigate Overoptimization (Coste et al., 2024)"
R1_ROUTER = (
    "Learning to Route Queries Across Knowledge Bases for Step-wise Retrieval-Augmented Reasoning "
    "(R1-Router and Step-GRPO, 2025)"
)
GIGPO = "Group-in-Group Policy Optimization for LLM Agent Training (Feng et al., 2025)"

# policy losses
PPO = "Proximal Policy Optimization Algorithms (Schulman et al., 2017)"
SFT = "Training language models to follow instructions with human feedback (Ouyang et al., 2022), supervised fine-tuning stage"
DAPO = "DAPO: An Open-Source LLM Reinforcement Learning System at Scale (Yu et al., 2025)"
DUAL_CLIP = "Mastering Complex Control in MOBA Games with Deep Reinforcement Learning (Ye et al., 2020)"
GSPO = "Group Sequence Policy Optimization (Zheng et al., 2025)"
GMPO = "GMPO: Geometric-Mean Policy Optimization (Zhao et al., 2025)"
CISPO = "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention (MiniMax, 2025)"
SAPO = "Soft Adaptive Policy Optimization (Gao et al., 2025)"
REINFORCE = (
    "Simple Statistical Gradient-Following Algorithms for Connectionist Reinforcement Learning (Williams, 1992)"
)
ENTROPY_MECHANISM = (
    "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models (Cui et al., 2025)"
)

# KL estimators
KL_APPROX = "Approximating KL Divergence (Schulman, 2020)"

# down-sampling
D3S = (
    "Learning More with Less: A Dynamic Dual-Level Down-Sampling Framework for Efficient Policy Optimization "
    "(2025)"
)
TWO_GRPO = "It Takes Two: Your GRPO Is Secretly DPO (2025)"
