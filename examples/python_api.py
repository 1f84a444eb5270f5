# %% [markdown]
# # grove from Python
#
# A notebook in the percent format (open it in Jupyter with jupytext, or in VS Code, or run it as a script:
# `python examples/python_api.py`). It trains the embedded SmolLM2-135M-Instruct with GRPO on a task built in
# memory, scored by a reward written here, then evaluates the result and reads the run back; the last cells give an
# environment written here to an agent run. Everything a config file does is available: the run directory, its
# logs, checkpoints, plots and `grove view` are the same as `grove train`'s.
#
# Run with the defaults it takes about 6 minutes on 2 CPU cores. `GROVE_EXAMPLE_MODEL` (a model directory) and
# `GROVE_EXAMPLE_STEPS` change the model and the number of steps (the test suite runs it on a tiny random model).

# %%
import os
import random
import re

import grove

MODEL = os.environ.get("GROVE_EXAMPLE_MODEL", "smollm2-135m")
STEPS = int(os.environ.get("GROVE_EXAMPLE_STEPS", "20"))
OUT = os.environ.get("GROVE_EXAMPLE_OUT", "runs/python-api")
QUICK = MODEL != "smollm2-135m"  # a tiny test model: small batches, short completions

# %% [markdown]
# ## The task: rows in memory
#
# Any list of dicts (or a 🤗 `datasets.Dataset`) with a prompt column and an answer column. grove writes the rows
# into the run directory (`OUT/data/*.jsonl`), so the run keeps what it trained on.

# %%
rng = random.Random(0)


def addition() -> dict:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return {"prompt": f"What is {a} + {b}? Answer with just the number.", "answer": str(a + b)}


train_rows = [addition() for _ in range(2000)]
eval_rows = [addition() for _ in range(40 if QUICK else 200)]
train_rows[0]

# %% [markdown]
# ## The reward: a Python function
#
# TRL's convention: `f(prompts, completions, **columns)` returns one score per completion (or `None` where it does
# not apply); the dataset's other columns (here `answer`) arrive as keyword arguments.

# %%
NUMBER = re.compile(r"-?\d+")


def correct(prompts, completions, answer, **_):
    """1 when the completion's last number is the answer."""
    last = [NUMBER.findall(c)[-1:] for c in completions]
    return [1.0 if found == [gold] else 0.0 for found, gold in zip(last, answer, strict=True)]


def words(prompts, completions, **_):
    """The completion's length in words (weight 0 below: logged beside the reward, not optimised)."""
    return [float(len(c.split())) for c in completions]


# %% [markdown]
# ## Train
#
# Keyword sections are merged into the config (here built from the defaults; a YAML path or a dict works as the
# first argument); a mistake is an error naming the key, as on the command line.

# %%
run = grove.train(
    model={"name": MODEL},
    rewards=[correct, {"id": words, "weight": 0.0}],
    train_dataset=train_rows,
    eval_dataset=eval_rows,
    output_dir=f"{OUT}/addition",
    threads=2,
    rollout={"temperature": 0.5, "max_new_tokens": 8 if QUICK else 32},
    algorithm={"advantage": {"id": "grpo"}},
    train={"steps": STEPS, "prompts_per_step": 2 if QUICK else 8, "completions_per_prompt": 2 if QUICK else 8},
    optim={"lr": 2.0e-5, "warmup_steps": min(2, STEPS - 1)},
    eval={"every": 10, "batch_size": 100},
    checkpoint={"every": 10},
)

# %% [markdown]
# ## What it learned
#
# `run.summary` holds the held-out evaluation before and after training (greedy accuracy with its 95% Wilson
# interval); `run.metrics` one record per step; `run.samples(step)` the logged completions.

# %%
for label in ("before", "after"):
    e = run.summary[label]
    print(f"{label:>6} (step {e['step']:>2}): {100 * e['accuracy']:5.1f}%  "
          f"({e['correct']}/{e['total']}, 95% CI {100 * e['ci_low']:.1f}–{100 * e['ci_high']:.1f}%)")
print("reward per step:", " ".join(f"{m['reward_mean']:.2f}" for m in run.metrics))
print("one sample:", run.samples(step=len(run.metrics))[0]["completion"])

# %% [markdown]
# ## Evaluate
#
# `grove.evaluate` reports what `grove eval` does; given a run it evaluates the run's trained model on its config.
# With `samples=k` it also samples k completions per item: sampled accuracy and pass@k.

# %%
result = grove.evaluate(run, samples=4, max_examples=20 if QUICK else 100)
print(result.report)
print({k: round(v, 3) for k, v in result.extra.items() if k.startswith("sampled/")})

# %% [markdown]
# ## Read a run back
#
# A run directory, from Python or from the command line, loads as a `grove.Run`; `run.plot()` draws the plots
# (`grove train` draws them at the end too) and `grove view RUN_DIR` opens the trajectories in the browser.

# %%
again = grove.load_run(f"{OUT}/addition")
print(again, again.model_dir)
print(again.plot())

# %% [markdown]
# ## An environment written here
#
# An environment is a factory returning an `EnvironmentSuite`; handed over as `env=`, the run's experience is
# multi-turn episodes, and GiGPO groups the steps of different episodes that met the same state (the anchor).
# Three steps show the mechanics, not learning: a base model this small needs the agent recipe (demonstrations,
# `grove sft`, then RL: docs/warm-start.md) before a group of its episodes holds both wins and losses.

# %%
from grove.envs import EnvironmentSuite, Observation, Transition  # noqa: E402


class Counter:
    """Count up to 3 with 'inc' and 'dec'; the task id sets the start."""

    def observe(self) -> Observation:
        return Observation(f"The counter shows {self.value}. Reach 3.", anchor=self.value,
                           admissible_actions=("inc", "dec"))

    def reset(self, task_id: int, seed: int) -> Observation:
        self.value = -(task_id % 3)
        return self.observe()

    def step(self, action: str) -> Transition:
        self.value += 1 if action == "inc" else -1
        won = self.value == 3
        return Transition(self.observe(), 1.0 if won else 0.0, won, {"won": won})


def counter_suite(params: dict) -> EnvironmentSuite:
    return EnvironmentSuite(name="counter", make=Counter, train_tasks=range(100), eval_tasks=range(1000, 1020),
                            instructions="Reply with one word: inc or dec.")


# first_mention: the first admissible action the reply names is the action (the base model writes no tags; the
# agent recipe of docs/warm-start.md teaches a format before RL)
agent = grove.train(
    model={"name": MODEL},
    env={"id": counter_suite, "max_turns": 6, "action_parser": {"id": "first_mention"}},
    output_dir=f"{OUT}/counter",
    threads=2,
    rollout={"temperature": 1.0, "max_new_tokens": 8 if QUICK else 16},
    algorithm={"advantage": {"id": "gigpo"}},
    train={"steps": 1 if QUICK else 3, "prompts_per_step": 2, "completions_per_prompt": 2 if QUICK else 4},
    eval={"every": 0},
)
for label in ("before", "after"):
    e = agent.summary[label]
    print(f"{label:>6}: success {100 * e['success_rate']:.0f}% of {e['total']} held-out episodes "
          f"(95% CI {100 * e['ci_low']:.0f}–{100 * e['ci_high']:.0f}%), mean turns {e['mean_turns']:.1f}")
