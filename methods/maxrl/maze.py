"""Toy T2: maze navigation with a tiny transformer trained by MaxRLTrainer (paper §6.2, App. E.1).

A scaled-down version of the paper's 17×17 maze experiment: 7×7 mazes are generated on the fly by
randomised Prim's algorithm (start (1, 1), goal (size−2, size−2)), written as a row-major token grid
``<bos> GRID_START cells (NEWLINE between rows) GRID_END PATH_START``; the policy answers with moves
``UP/DOWN/LEFT/RIGHT`` and ``DONE``. The reward is the official judge (``verl/utils/reward_score/
maze.py`` in tajwarfahim/maxrl): 0 without ``DONE`` or with a non-move token before it; 1 iff the
moves reach GOAL from START without hitting a wall or leaving the grid (moves after GOAL are ignored). A tiny Qwen2 (vocabulary 32) is first
warmed up by supervised learning on BFS shortest paths until its pass@1 lies in a target band, then
trained with GRPO or MaxRL through :class:`methods.maxrl.MaxRLTrainer` (TRL, HF generation).

Shapes: M mazes, S samples per maze, L sequence length.
"""

from __future__ import annotations

import copy
import logging
import random
from collections import deque

import torch
from datasets import Dataset
from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

from common.tiny import tiny_causal_lm, word_tokenizer
from common.train_loop import train_steps

from .config import MazeToyConfig
from .eval import pass_at_k

logger = logging.getLogger(__name__)

__all__ = [
    "MazeToyConfig",
    "generate_maze",
    "maze_prompt",
    "maze_reward",
    "maze_tokenizer",
    "run_maze_toy",
    "shortest_path",
]

WALL, OPEN = "#", "."
MOVES = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1)}
_SPECIAL = ["<pad>", "<bos>", "<eos>"]
_WORDS = ["GRID_START", "GRID_END", "NEWLINE", "WALL", "PATH", "START", "GOAL", "PATH_START"]
_WORDS += [*MOVES, "DONE"]
VOCAB = _SPECIAL + _WORDS  # 16 used tokens; the model's vocabulary is 32 (paper App. E.1.1)


def generate_maze(size: int, rng: random.Random) -> list[str]:
    """Randomised Prim's maze: cells at odd coordinates, walls elsewhere; rows of '#'/'.'.

    Source: official ``maze/generate_maze.py`` (Prim's algorithm, start (1, 1)); paper App. E.1.
    """
    grid = [[WALL] * size for _ in range(size)]
    grid[1][1] = OPEN
    frontier = [(1, 1, dr, dc) for dr, dc in ((0, 2), (2, 0), (0, -2), (-2, 0))]
    while frontier:
        r, c, dr, dc = frontier.pop(rng.randrange(len(frontier)))
        nr, nc = r + dr, c + dc
        if 0 < nr < size - 1 and 0 < nc < size - 1 and grid[nr][nc] == WALL:
            grid[r + dr // 2][c + dc // 2] = OPEN
            grid[nr][nc] = OPEN
            frontier += [(nr, nc, a, b) for a, b in ((0, 2), (2, 0), (0, -2), (-2, 0))]
    return ["".join(row) for row in grid]


def shortest_path(maze: list[str]) -> list[str]:
    """BFS shortest move sequence from (1, 1) to (size−2, size−2).

    Source: our inference (SFT warm-up targets for the toy); not in the paper.
    """
    size = len(maze)
    start, goal = (1, 1), (size - 2, size - 2)
    prev = {start: None}
    queue = deque([start])
    while queue:
        cur = queue.popleft()
        if cur == goal:
            break
        for name, (dr, dc) in MOVES.items():
            nxt = (cur[0] + dr, cur[1] + dc)
            if maze[nxt[0]][nxt[1]] == OPEN and nxt not in prev:
                prev[nxt] = (cur, name)
                queue.append(nxt)
    moves, node = [], goal
    while prev[node] is not None:
        node, name = prev[node]
        moves.append(name)
    return moves[::-1]


def maze_prompt(maze: list[str]) -> str:
    """Token string of the maze prompt (App. E.1 layout), space separated."""
    size = len(maze)
    rows = []
    for r, row in enumerate(maze):
        cells = []
        for c, ch in enumerate(row):
            if (r, c) == (1, 1):
                cells.append("START")
            elif (r, c) == (size - 2, size - 2):
                cells.append("GOAL")
            else:
                cells.append("WALL" if ch == WALL else "PATH")
        rows.append(" ".join(cells))
    return "<bos> GRID_START " + " NEWLINE ".join(rows) + " GRID_END PATH_START"


def _solves(maze: list[str], text: str) -> bool:
    """The official judge (``verl/utils/reward_score/maze.py::judge_maze``, tajwarfahim/maxrl).

    1. The completion must contain ``DONE``; without it the answer is a format error (0).
    2. Every token before the first ``DONE`` must be a move (UP/DOWN/LEFT/RIGHT); anything else
       is a format error (0), wherever it stands.
    3. The moves are executed from START; leaving the grid or entering a wall fails (0); reaching
       GOAL ends the episode with success (1), so moves after the goal are not executed.
    4. Otherwise success iff the last position is GOAL.
    """
    size = len(maze)
    tokens = text.split()
    if "DONE" not in tokens:
        return False
    actions = tokens[: tokens.index("DONE")]
    if any(tok not in MOVES for tok in actions):
        return False
    pos, goal = (1, 1), (size - 2, size - 2)
    for tok in actions:
        dr, dc = MOVES[tok]
        pos = (pos[0] + dr, pos[1] + dc)
        if not (0 <= pos[0] < size and 0 <= pos[1] < size) or maze[pos[0]][pos[1]] == WALL:
            return False
        if pos == goal:
            return True  # the official MazeEnv stops at the goal; later moves are not executed
    return pos == goal


def maze_reward(completions: list[str], maze: list[str], **kwargs) -> list[float]:
    """TRL reward function: the official maze judge (``reward_score/maze.py``), see :func:`_solves`.

    Args:
        completions: Decoded completions (moves separated by spaces, then ``DONE``).
        maze: One maze per completion, rows joined by ``"/"``.

    Returns:
        1.0 for a completion that reaches the goal before ``DONE``, else 0.0.
    """
    if len(completions) != len(maze):
        raise ValueError(
            f"completions and maze must have the same length, got {len(completions)} and {len(maze)}"
        )
    return [float(_solves(m.split("/"), c)) for c, m in zip(completions, maze, strict=True)]


def maze_tokenizer() -> PreTrainedTokenizerFast:
    """Word-level tokenizer over :data:`VOCAB` (pad/bos/eos special, left padding).

    Source: paper App. E.1 (32-token vocabulary); the word-level tokenizer is engineering.
    """
    return word_tokenizer(
        {w: i for i, w in enumerate(VOCAB)},
        "<pad>",
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def _model(cfg: MazeToyConfig, tok, seed: int) -> Qwen2ForCausalLM:
    """The toy's Qwen2 (vocabulary 32, train mode); the global RNG continues from the seeded init."""
    model, _ = tiny_causal_lm(
        "qwen2",
        hidden_size=cfg.hidden_size,
        intermediate_size=4 * cfg.hidden_size,
        max_position_embeddings=128,
        seed=seed,
        tokenizer=tok,
        vocab_size=32,
        fork_rng=False,
        record=False,
        train=True,
        rope_theta=1e6,
    )
    return model


def _mazes(n: int, size: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [generate_maze(size, rng) for _ in range(n)]


@torch.no_grad()
def _evaluate(model, tok, mazes, samples: int, k: int, max_new: int, seed: int) -> dict[str, float]:
    """pass@1 and pass@k (unbiased, n = samples) at temperature 1 over held-out mazes."""
    model.eval()
    torch.manual_seed(seed)
    correct = []
    for start in range(0, len(mazes), 16):
        chunk = mazes[start : start + 16]
        enc = tok([maze_prompt(m) for m in chunk], return_tensors="pt", padding=True)
        out = model.generate(
            **enc,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new,
            num_return_sequences=samples,
        )  # [M·S, L]
        texts = tok.batch_decode(out[:, enc["input_ids"].size(1) :], skip_special_tokens=True)
        for i, m in enumerate(chunk):
            correct.append(sum(_solves(m, t) for t in texts[i * samples : (i + 1) * samples]))
    c = torch.tensor(correct)
    return {
        "pass@1": float(pass_at_k(samples, c, 1).mean()),
        f"pass@{k}": float(pass_at_k(samples, c, k).mean()),
    }


def _sft(model, tok, cfg: MazeToyConfig, held_out, seed: int) -> tuple[int, float]:
    """Supervised warm-up on shortest paths until held-out pass@1 lies in ``cfg.sft_band``."""
    rng = random.Random(seed + 1)
    done = {"step": cfg.sft_max_steps, "p1": 0.0}

    def loss_fn(_i: int) -> torch.Tensor:
        batch = [generate_maze(cfg.size, rng) for _ in range(cfg.sft_batch)]
        prompts = [tok(maze_prompt(m))["input_ids"] for m in batch]
        answers = [tok(" ".join([*shortest_path(m), "DONE"]))["input_ids"] for m in batch]
        length = max(len(p) + len(a) + 1 for p, a in zip(prompts, answers))
        ids = torch.full((len(batch), length), tok.pad_token_id)
        labels = torch.full_like(ids, -100)
        mask = torch.zeros_like(ids)
        for i, (p, a) in enumerate(zip(prompts, answers)):
            seq = p + a + [tok.eos_token_id]
            ids[i, : len(seq)] = torch.tensor(seq)
            labels[i, len(p) : len(seq)] = torch.tensor(a + [tok.eos_token_id])
            mask[i, : len(seq)] = 1
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss

    def check(i: int, _loss: float) -> bool:
        """Held-out pass@1 every ``sft_check_every`` steps; True stops once it reaches the band."""
        step = i + 1
        if step % cfg.sft_check_every != 0:
            return False
        p1 = _evaluate(model, tok, held_out, 8, 1, cfg.max_completion_length, seed)["pass@1"]
        done["p1"] = p1
        logger.info("maze SFT step %d: held-out pass@1 %.3f", step, p1)
        if p1 >= cfg.sft_band[0]:
            done["step"] = step
            return True
        if step < cfg.sft_max_steps:
            model.train()  # _evaluate leaves eval mode; the next step trains
        return False

    # AdamW's default weight decay (0.01), as the hand-written loop had.
    train_steps(
        model,
        loss_fn,
        cfg.sft_max_steps,
        lr=cfg.sft_lr,
        weight_decay=0.01,
        desc="maze SFT",
        callback=check,
    )
    return done["step"], done["p1"]


def run_maze_toy(
    cfg: MazeToyConfig,
    estimators: tuple[str, ...] = ("grpo", "maxrl"),
    seed: int = 0,
    output_dir="/tmp",
) -> dict[str, dict[str, float]]:
    """SFT warm-up once, then RL with each estimator from the same warm start; evaluate each.

    Source: paper App. E.1.3 (SFT, then RL per estimator), scaled down to CPU (our choice).

    Returns:
        ``{arm: {"pass@1": ., "pass@k": .}}`` for ``"sft"`` and each estimator.
    """
    from common.rl import cpu_grpo_kwargs

    from .trainer import MaxRLConfig, MaxRLTrainer

    tok = maze_tokenizer()
    model = _model(cfg, tok, seed)
    held_out = _mazes(cfg.eval_mazes, cfg.size, seed + 10_000)
    sft_steps, sft_p1 = _sft(model, tok, cfg, held_out[:32], seed)
    results = {
        "sft": {
            **_evaluate(
                model, tok, held_out, cfg.eval_samples, cfg.eval_k, cfg.max_completion_length, seed
            ),
            "sft_steps": float(sft_steps),
        }
    }
    train_mazes = _mazes(cfg.rl_steps * cfg.rl_prompts, cfg.size, seed + 1)
    data = Dataset.from_dict(
        {
            "prompt": [maze_prompt(m) for m in train_mazes],
            "maze": ["/".join(m) for m in train_mazes],
        }
    )
    for est in estimators:
        policy = copy.deepcopy(model)
        args = MaxRLConfig(
            **cpu_grpo_kwargs(
                output_dir=f"{output_dir}/maze_{est}",
                advantage_estimator=est,
                max_steps=cfg.rl_steps,
                per_device_train_batch_size=cfg.rl_prompts * cfg.num_generations,
                num_generations=cfg.num_generations,
                max_completion_length=cfg.max_completion_length,
                learning_rate=cfg.rl_lr,
                lr_scheduler_type="constant",
                temperature=1.0,
                top_k=0,
                seed=seed,
                logging_steps=25,
                shuffle_dataset=False,
            )
        )
        trainer = MaxRLTrainer(
            model=policy,
            reward_funcs=maze_reward,
            args=args,
            train_dataset=data,
            processing_class=tok,
        )
        trainer.train()
        results[est] = _evaluate(
            policy, tok, held_out, cfg.eval_samples, cfg.eval_k, cfg.max_completion_length, seed
        )
    return results
