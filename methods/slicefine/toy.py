"""The CPU toy: order-sensitive sentence classification on the offline MiniLM.

Sentences name two nouns of different categories ("the {n1} sat beside the {n2}"); the label is the
category of the *second* noun. Mean-pooled frozen features hold both nouns symmetrically, so a
head-only probe is weak and the encoder must adapt. Arms, all with one shared learning rate, batch,
step count and seed: head only, PEFT LoRA, a static slice, SliceFine (row sweep), SliceFine
(row/column alternation), and SliceFine on a randomly re-initialised copy of the same architecture.
"""

from __future__ import annotations

import copy
import logging
import random
import statistics
import time

import torch
from torch import nn

from common.threads import torch_threads
from common.train_loop import train_steps
from methods.slicefine.config import ToyConfig
from methods.slicefine.diagnostics import local_ticket_test, spectral_balance, task_energy
from methods.slicefine.model import (
    apply_slicefine,
    check_optimizer,
    reset_slice_optimizer_state,
)

logger = logging.getLogger(__name__)

CATEGORIES = {
    "animal": "cat dog horse cow sheep goat tiger lion mouse rabbit fox wolf bear deer duck".split(),
    "food": "bread apple cheese rice soup cake pizza salad pasta honey grape lemon melon bean corn".split(),
    "vehicle": "car bus truck bicycle train plane boat taxi tractor scooter van tram ship jet cart".split(),
    "tool": "hammer wrench saw drill shovel rake knife axe chisel pliers ladder rope brush file clamp".split(),
}
TEMPLATES = [
    "the {a} sat beside the {b}",
    "a {a} was found near a {b}",
    "next to the {a} there is a {b}",
    "after the {a} came the {b}",
    "she saw a {a} and then a {b}",
]


def make_data(n: int, seed: int) -> tuple[list[str], list[int]]:
    """``n`` sentences and labels (the second noun's category index)."""
    rng = random.Random(seed)
    names = list(CATEGORIES)
    texts, labels = [], []
    for _ in range(n):
        c1, c2 = rng.sample(range(len(names)), 2)
        a, b = rng.choice(CATEGORIES[names[c1]]), rng.choice(CATEGORIES[names[c2]])
        texts.append(rng.choice(TEMPLATES).format(a=a, b=b))
        labels.append(c2)
    return texts, labels


class Classifier(nn.Module):
    """Encoder + mean pooling + linear head."""

    def __init__(self, encoder: nn.Module, n_classes: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.config.hidden_size, n_classes)

    def features(self, input_ids, attention_mask):
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)  # [B, T, 1]
        return (h * m).sum(1) / m.sum(1)  # [B, D]

    def forward(self, input_ids, attention_mask):
        return self.head(self.features(input_ids, attention_mask))


def load_minilm(n_layers: int | None = None):
    """The offline MiniLM (6-layer BERT, hidden 384) as a ``BertModel`` + its WordPiece tokenizer.

    Args:
        n_layers: keep only the first ``n_layers`` transformer layers (None keeps all six).
    """
    from transformers import AutoModel, AutoTokenizer

    from common.embeddings import default_model_path

    path = default_model_path()
    model = AutoModel.from_pretrained(path)
    if n_layers is not None:
        if not 1 <= n_layers <= len(model.encoder.layer):
            raise ValueError(
                f"n_layers must lie in [1, {len(model.encoder.layer)}], got {n_layers}"
            )
        model.encoder.layer = model.encoder.layer[:n_layers]
        model.config.num_hidden_layers = n_layers
    return model, AutoTokenizer.from_pretrained(path)


def _build_arm(arm: str, encoder, cfg: ToyConfig, seed: int):
    """Returns (model, slicefine wrapper or None, encoder-side trainable count)."""
    torch.manual_seed(seed)
    enc = copy.deepcopy(encoder)
    if arm == "slicefine_random_init":
        from transformers import AutoModel

        enc = AutoModel.from_config(enc.config)
    model = Classifier(enc, len(CATEGORIES))
    sf = None
    if arm == "head":
        for p in model.encoder.parameters():
            p.requires_grad_(False)
    elif arm == "lora":
        from peft import LoraConfig, get_peft_model

        rank = cfg.lora_r or cfg.r
        lora = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=cfg.targets, lora_dropout=0.0)
        model.encoder = get_peft_model(model.encoder, lora)
    else:
        mode = "alternate" if arm == "slicefine_alt" else "row"
        sf = apply_slicefine(
            model,
            cfg.targets,
            r=cfg.r,
            mode=mode,
            switch_every=None if arm == "static" else cfg.switch_every,
            seed=seed,
            train_bias=cfg.train_bias,
            modules_to_save=["head"],
        )
    n_enc = sum(
        p.numel() for n, p in model.named_parameters() if p.requires_grad and "head" not in n
    )
    return model, sf, n_enc


def _evaluate(model, enc_test, y_test, batch: int = 200) -> float:
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(y_test), batch):
            logits = model(
                enc_test["input_ids"][i : i + batch], enc_test["attention_mask"][i : i + batch]
            )
            correct += int((logits.argmax(-1) == y_test[i : i + batch]).sum())
    return correct / len(y_test)


def arm_lr(cfg: ToyConfig, arm: str) -> float:
    """The arm's learning rate: ``cfg.lr_by_arm[arm]`` if set, else the shared ``cfg.lr``."""
    return cfg.lr_by_arm.get(arm, cfg.lr)


def train_arm(arm: str, encoder, tok, cfg: ToyConfig, seed: int, data) -> dict[str, float]:
    """Trains one arm and returns its accuracy, parameter count, step time and state memory.

    ``data`` is ``(train, test)`` or ``(train, test, validation)``, each ``(texts, labels)``; with a
    validation split the result also holds ``val_accuracy``.
    """
    (x_tr, y_tr), (x_te, y_te) = data[:2]
    kw = {"padding": True, "truncation": True, "max_length": cfg.max_length, "return_tensors": "pt"}
    enc_tr, enc_te = tok(x_tr, **kw), tok(x_te, **kw)
    y_tr, y_te = torch.tensor(y_tr), torch.tensor(y_te)
    model, sf, n_enc = _build_arm(arm, encoder, cfg, seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=arm_lr(cfg, arm), weight_decay=0.0)
    check_optimizer(opt)
    gen = torch.Generator().manual_seed(seed)
    times: list[float] = []
    t0 = [0.0]  # start of the current step's timing (after the batch draw)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()

    def loss_fn(_step: int) -> torch.Tensor:
        idx = torch.randint(0, len(y_tr), (cfg.batch_size,), generator=gen)
        t0[0] = time.perf_counter()
        return nn.functional.cross_entropy(
            model(enc_tr["input_ids"][idx], enc_tr["attention_mask"][idx]), y_tr[idx]
        )

    def after_step(step: int, _loss: float) -> None:
        if sf is not None and sf.config.switch_every and (step + 1) % sf.config.switch_every == 0:
            sf.switch()
            reset_slice_optimizer_state(opt, sf)
        times.append(time.perf_counter() - t0[0])

    losses = train_steps(
        model, loss_fn, cfg.steps, optimizer=opt, desc=f"slicefine toy [{arm}]", callback=after_step
    )
    trainable = sum(p.numel() for p in params)
    # Bytes of training state that scale with the method: parameters' grads + 2 AdamW moments (fp32).
    state_bytes = 3 * 4 * trainable
    out = {
        "accuracy": _evaluate(model, enc_te, y_te),
        "trainable_params": float(n_enc),
        "trainable_params_with_head": float(trainable),
        "step_ms": 1000 * statistics.median(times),
        "train_state_kib": state_bytes / 1024,
        "final_loss": statistics.mean(losses[-10:]),
    }
    if len(data) > 2:
        x_va, y_va = data[2]
        out["val_accuracy"] = _evaluate(model, tok(x_va, **kw), torch.tensor(y_va))
    if torch.cuda.is_available():
        out["peak_mem_mib"] = torch.cuda.max_memory_allocated() / 2**20
    out["_losses"] = losses  # type: ignore[assignment]
    return out


def run_diagnostics(encoder, tok, seed: int = 0) -> dict[str, float]:
    """Spectral balance (pretrained vs re-initialised), local-winning rate and task energy."""
    from transformers import AutoModel

    torch.manual_seed(seed)
    rand = AutoModel.from_config(encoder.config)
    pre_cv = [
        spectral_balance(lyr.attention.self.query.weight, k=12)["cv_energy"]
        for lyr in encoder.encoder.layer
    ]
    rnd_cv = [
        spectral_balance(lyr.attention.self.query.weight, k=12)["cv_energy"]
        for lyr in rand.encoder.layer
    ]
    texts, labels = make_data(256, seed + 99)
    enc = tok(texts, padding=True, return_tensors="pt")
    y = torch.tensor(labels)
    clf = Classifier(copy.deepcopy(encoder), len(CATEGORIES))
    layer = min(3, len(clf.encoder.encoder.layer) - 1)
    lin = clf.encoder.encoder.layer[layer].attention.self.query

    def loss_fn():
        return nn.functional.cross_entropy(
            clf(enc["input_ids"][:64], enc["attention_mask"][:64]), y[:64]
        )

    ticket = local_ticket_test(lin, loss_fn, r=4, n_slices=20, lr=1e-2, seed=seed)
    with torch.no_grad():
        feats = Classifier(encoder, len(CATEGORIES)).features(
            enc["input_ids"], enc["attention_mask"]
        )
        feats_rand = Classifier(rand, len(CATEGORIES)).features(
            enc["input_ids"], enc["attention_mask"]
        )
    return {
        "cv_energy_pretrained": statistics.mean(pre_cv),
        "cv_energy_random": statistics.mean(rnd_cv),
        "local_win_rate": ticket["win_rate"],
        "task_energy_pretrained": task_energy(feats, y, k=32),
        "task_energy_random": task_energy(feats_rand, y, k=32),
    }


def _plot(per_arm: dict[str, list[dict]], path) -> None:
    from common.tracking import pyplot, save_plot

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, runs in per_arm.items():
        losses = runs[0]["_losses"]
        k = 10
        smooth = [statistics.mean(losses[max(0, i - k) : i + 1]) for i in range(len(losses))]
        ax.plot(smooth, label=arm)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (cross-entropy, 10-step mean)")
    ax.set_title("SliceFine toy: second-noun category on MiniLM")
    ax.legend(fontsize=8)
    save_plot(fig, path)


def _seed_means(per_arm: dict[str, list[dict]]) -> dict[str, dict[str, float]]:
    """Every arm's metrics averaged over seeds (:func:`common.metrics.mean_over_seeds`; keys
    starting with ``_`` dropped), plus ``accuracy_std`` with two seeds or more."""
    from common.metrics import mean_over_seeds

    n = len(next(iter(per_arm.values())))
    per_seed = [
        {
            arm: {k: v for k, v in runs[i].items() if not k.startswith("_")}
            for arm, runs in per_arm.items()
        }
        for i in range(n)
    ]
    return mean_over_seeds(per_seed, std_keys=("accuracy",))


@torch_threads(1)  # tiny matmuls: extra OpenMP threads only spin on a busy machine
def run_toy(run) -> dict[str, float]:
    """``stage=toy``: every arm on the same data and seeds; writes results and the loss curves.

    Args:
        run: the :class:`common.config.Run` of the CLI (``run.method.toy`` is the setting).
    """
    from common.tracking import write_results

    tc = run.method.toy
    t0 = time.time()
    encoder, tok = load_minilm(tc.encoder_layers)
    seeds = [run.seed + s for s in tc.seeds]
    per_arm: dict[str, list[dict]] = {a: [] for a in tc.arms}
    for seed in seeds:
        data = (make_data(tc.n_train, seed), make_data(tc.n_test, 10_000 + seed))
        if tc.n_val:
            data += (make_data(tc.n_val, 20_000 + seed),)
        for arm in tc.arms:
            per_arm[arm].append(train_arm(arm, encoder, tok, tc, seed, data))
    metrics = _seed_means(per_arm)
    extra = {}
    if tc.diagnostics:
        extra["diagnostics"] = run_diagnostics(encoder, tok, seed=seeds[0])
        metrics["diagnostics"] = extra["diagnostics"]
    _plot(per_arm, run.run_dir / "loss_curves.png")
    return write_results(
        run.run_dir,
        "slicefine",
        metrics,
        cfg=run.cfg,
        extra=extra,
        wall_time_s=time.time() - t0,
        notes=f"MiniLM (offline), r={tc.r}, N={tc.switch_every}, {tc.steps} steps, batch "
        f"{tc.batch_size}, lr {tc.lr} (per arm: {tc.lr_by_arm or 'none'}); seeds {seeds}.",
    )
