"""Molecular multi-objective problems for MCCE (official `problem/molecules/evaluator.py`).

A problem turns candidate strings (SMILES, or SELFIES for the CPU toy) into canonical SMILES, raw objective
values f_j(x), normalised values, and the minimisation-form vector t(x) with the scalar fitness
F(x) = m − Σ_j t_j(x) used by the official code for ranking. The paper's 5-objective task uses
SA, DRD2, QED, GSK3β and JNK3; the toy replaces the TDC oracles by an RDKit Tanimoto objective.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

logger = logging.getLogger(__name__)

Direction = Literal["min", "max"]

# The official code's normalisers (problem/molecules/evaluator.py); all other objectives are in [0, 1].
NORMALIZERS: dict[str, Callable[[float], float]] = {
    "sa": lambda s: (s - 1.0) / 9.0,
    "logs": lambda s: (s + 8.0) / 9.0,
}

# TDC oracle name -> model file TDC expects under its oracle folder.
TDC_ORACLE_FILES = {
    "drd2": "drd2_current.pkl",
    "gsk3b": "gsk3b_current.pkl",
    "jnk3": "jnk3_current.pkl",
}

OBJECTIVE_DESCRIPTIONS = {
    "qed": "quantitative estimate of drug-likeness, in [0, 1]; higher means more drug-like",
    "sa": "synthetic accessibility score, in [1, 10]; lower means easier to synthesise",
    "drd2": "predicted probability of activity against dopamine receptor D2, in [0, 1]",
    "gsk3b": "predicted probability of inhibiting GSK3-beta, in [0, 1]",
    "jnk3": "predicted probability of inhibiting JNK3, in [0, 1]",
    "logp": "octanol-water partition coefficient (Crippen)",
    "celecoxib_sim": "Tanimoto similarity (Morgan r=2, 2048 bits) to celecoxib, in [0, 1]",
}

CELECOXIB = "Cc1ccc(-c2cc(C(F)(F)F)nn2-c2ccc(S(N)(=O)=O)cc2)cc1"


@runtime_checkable
class Problem(Protocol):
    """What the optimiser needs from a problem (our API, `problems/base.py`)."""

    goals: list[str]
    directions: list[Direction]

    def canonicalize(self, value: str) -> str | None: ...

    def evaluate(self, values: Sequence[str]) -> np.ndarray: ...

    def transform(self, raw: np.ndarray) -> np.ndarray: ...

    def to_text(self, canonical: str) -> str: ...

    def similarity(self, a: str, b: str) -> float: ...


def _sascorer() -> Any:
    from rdkit.Chem import RDConfig

    path = os.path.join(RDConfig.RDContribDir, "SA_Score")
    if path not in sys.path:
        sys.path.append(path)
    import sascorer  # RDKit Contrib (Ertl & Schuffenhauer); ships with the rdkit wheel

    return sascorer


@lru_cache(maxsize=200_000)
def _fingerprint(smiles: str) -> Any:
    from rdkit import Chem

    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise ValueError(f"smiles must be a valid SMILES, got {smiles!r}")
    return _morgan_generator().GetFingerprint(mol)


@lru_cache(maxsize=1)
def _morgan_generator() -> Any:
    from rdkit.Chem import rdFingerprintGenerator

    return rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)


def tanimoto(a: str, b: str) -> float:
    """Tanimoto similarity of Morgan r=2, 2048-bit fingerprints (our choice: used everywhere)."""
    from rdkit import DataStructs

    return float(DataStructs.TanimotoSimilarity(_fingerprint(a), _fingerprint(b)))


def _drd2_features(mol: Any) -> np.ndarray:
    """TDC's DRD2 featuriser: Morgan feature-invariant counts, radius 3, folded to 2048 ``[1, 2048]``."""
    from rdkit.Chem import rdFingerprintGenerator as fpgen

    gen = fpgen.GetMorganGenerator(
        radius=3, atomInvariantsGenerator=fpgen.GetMorganFeatureAtomInvGen()
    )
    nfp = np.zeros((1, 2048), np.int32)
    for idx, v in gen.GetSparseCountFingerprint(mol).GetNonzeroElements().items():
        nfp[0, idx % 2048] += int(v)
    return nfp


def _kinase_features(mol: Any) -> np.ndarray:
    """TDC's GSK3B/JNK3 featuriser: Morgan bits, radius 2, 2048 bits ``[1, 2048]``."""
    from rdkit.Chem import rdFingerprintGenerator as fpgen

    gen = fpgen.GetMorganGenerator(radius=2, fpSize=2048)
    return gen.GetFingerprintAsNumPy(mol).astype(np.float64).reshape(1, -1)


_TDC_FEATURES = {"drd2": _drd2_features, "gsk3b": _kinase_features, "jnk3": _kinase_features}


def _unpickle_oracle(path: str) -> Any:
    """The scikit-learn classifier pickled in a TDC oracle file, or an error saying how to fix it.

    TDC's files are pickles of the scikit-learn version that wrote them: the first release needs
    scikit-learn <= 0.21 (``sklearn.ensemble.forest``, ``sklearn.svm.classes``), later ones were
    re-pickled for 0.24 / 1.x, and a tree pickled by another 1.x release can fail on its node dtype
    (TDC issues #93, #163, #205, #238, #372). A version mismatch that still loads is logged.
    """
    import pickle
    import warnings

    import sklearn

    have = f"scikit-learn {sklearn.__version__}"
    try:
        with warnings.catch_warnings(record=True) as caught, open(path, "rb") as fh:
            warnings.simplefilter("always")
            clf = pickle.load(fh)  # a scikit-learn classifier, as TDC's load_pickled_model
    except (ModuleNotFoundError, AttributeError, ValueError, pickle.UnpicklingError, EOFError) as e:
        raise ValueError(
            f"TDC oracle file {path!r} cannot be unpickled by {have} ({type(e).__name__}: {e}); "
            "the file is tied to the scikit-learn that wrote it: fetch the TDC file pickled for "
            "this scikit-learn (PyTDC >= 0.3.7 downloads them) or run with the version that wrote "
            "it"
        ) from e
    for w in caught:
        if type(w.message).__name__ == "InconsistentVersionWarning":
            logger.warning("TDC oracle %s was pickled by another scikit-learn: %s", path, w.message)
    if not hasattr(clf, "predict_proba"):
        raise TypeError(f"TDC oracle file {path!r} holds {type(clf).__name__}, not a classifier")
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(clf)
    except NotFittedError as e:
        raise ValueError(
            f"TDC oracle file {path!r} holds an unfitted {type(clf).__name__} (TDC issue #372: a "
            "truncated download); fetch the file again"
        ) from e
    return clf


def load_tdc_oracle(name: str, oracle_dir: str = "oracle") -> Callable[[str], float]:
    """A TDC oracle (DRD2/GSK3B/JNK3) from its local model file, never from the network.

    Reads the same scikit-learn model files as TDC (``drd2_current.pkl``, ``gsk3b_current.pkl``,
    ``jnk3_current.pkl``; the official repo ships them under ``oracle/``) and featurises as TDC's
    ``chem_utils/oracle/oracle.py`` does (DRD2: Morgan feature counts, radius 3, folded to 2048;
    GSK3B/JNK3: Morgan bits, radius 2, 2048); the score is ``predict_proba[:, 1]``, 0 for an
    unparsable SMILES. PyTDC itself is not needed.

    Raises:
        ValueError: unknown ``name``.
        FileNotFoundError: the oracle's model file is not in ``oracle_dir`` (TDC would download it).
    """

    fname = TDC_ORACLE_FILES.get(name)
    if fname is None:
        raise ValueError(f"name must be one of {sorted(TDC_ORACLE_FILES)}, got {name!r}")
    path = os.path.join(oracle_dir, fname)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"TDC oracle {name!r} needs its model file {path!r}, which is missing; copy "
            f"{fname} into {oracle_dir!r} (or pass oracles={{{name!r}: callable}}) — the run is offline"
        )
    clf = _unpickle_oracle(path)
    featurise = _TDC_FEATURES[name]

    def oracle(smiles: str) -> float:
        from rdkit import Chem

        mol = Chem.MolFromSmiles(smiles)
        if mol is None:
            return 0.0
        return float(clf.predict_proba(featurise(mol))[0, 1])

    return oracle


@dataclass
class MoleculeProblem:
    """Multi-objective molecule problem (official `problem/molecules/evaluator.py`).

    Args:
        goals: objective names, e.g. ``["sa", "drd2", "qed", "gsk3b", "jnk3"]``.
        directions: ``"min"`` or ``"max"`` per goal.
        representation: ``"smiles"`` (paper) or ``"selfies"`` (CPU toy): how candidates are written
            in prompts and responses. The archive always stores canonical SMILES.
        oracles: name -> callable(smiles) -> float for objectives that are not built in (the TDC
            oracles); missing TDC oracles are loaded lazily from ``oracle_dir``.
        target: SMILES of the target for ``*_sim`` objectives (celecoxib by default).
        strict: raise (instead of warn) when an objective without a normaliser leaves [0, 1].
        task: the task sentence used in prompts.
    """

    goals: list[str]
    directions: list[Direction]
    representation: Literal["smiles", "selfies"] = "smiles"
    oracles: dict[str, Callable[[str], float]] = field(default_factory=dict)
    oracle_dir: str = "oracle"
    target: str = CELECOXIB
    strict: bool = False
    task: str = "Propose new molecules that improve all the objectives below."

    def __post_init__(self) -> None:
        self.goals = list(self.goals)
        self.directions = list(self.directions)
        if len(self.goals) != len(self.directions):
            raise ValueError(
                f"goals and directions must have the same length, got {len(self.goals)} goals "
                f"and {len(self.directions)} directions"
            )
        if not self.goals:
            raise ValueError("goals must name at least one objective")
        for d in self.directions:
            if d not in ("min", "max"):
                raise ValueError(f"directions must be 'min' or 'max', got {d!r}")
        known = set(OBJECTIVE_DESCRIPTIONS) | set(TDC_ORACLE_FILES) | set(self.oracles)
        for g in self.goals:
            if g not in known and not g.endswith("_sim"):
                raise ValueError(f"goals has unknown objective {g!r}; known: {sorted(known)}")
        if self.representation not in ("smiles", "selfies"):
            raise ValueError(
                f"representation must be 'smiles' or 'selfies', got {self.representation!r}"
            )

    @property
    def m(self) -> int:
        return len(self.goals)

    @property
    def descriptions(self) -> dict[str, str]:
        return {g: OBJECTIVE_DESCRIPTIONS.get(g, f"objective {g}") for g in self.goals}

    # ------------------------------------------------------------------ strings
    def canonicalize(self, value: str, representation: str | None = None) -> str | None:
        """Canonical SMILES of ``value``, or None if it is not a valid molecule.

        ``representation`` overrides the problem's (the toy's seeds are SMILES, its prompts SELFIES).
        """
        from rdkit import Chem, RDLogger

        RDLogger.DisableLog("rdApp.*")
        if not isinstance(value, str):
            return None
        value = value.strip()
        if not value:
            return None
        if (representation or self.representation) == "selfies":
            import selfies as sf

            try:
                value = sf.decoder(value)
            except Exception:  # selfies raises DecoderError on malformed tokens
                return None
            if not value:
                return None
        mol = Chem.MolFromSmiles(value)
        if mol is None or mol.GetNumAtoms() == 0:
            return None
        return Chem.MolToSmiles(mol, canonical=True)

    def to_text(self, canonical: str) -> str:
        """How a stored molecule is written in a prompt (SMILES, or SELFIES for the toy)."""
        if self.representation == "selfies":
            import selfies as sf

            return sf.encoder(canonical)
        return canonical

    def similarity(self, a: str, b: str) -> float:
        return tanimoto(a, b)

    # ------------------------------------------------------------------ scoring
    def _objective(self, name: str) -> Callable[[str], float]:
        if name in self.oracles:
            return self.oracles[name]
        from rdkit import Chem
        from rdkit.Chem import QED, Crippen

        if name == "qed":
            return lambda s: float(QED.qed(Chem.MolFromSmiles(s)))
        if name == "sa":
            scorer = _sascorer()
            return lambda s: float(scorer.calculateScore(Chem.MolFromSmiles(s)))
        if name == "logp":
            return lambda s: float(Crippen.MolLogP(Chem.MolFromSmiles(s)))
        if name.endswith("_sim"):
            target = self.target
            return lambda s: tanimoto(s, target)
        if name in TDC_ORACLE_FILES:
            self.oracles[name] = load_tdc_oracle(name, self.oracle_dir)
            return self.oracles[name]
        raise ValueError(f"no scorer for objective {name!r}")

    def evaluate(self, values: Sequence[str]) -> np.ndarray:
        """Raw objective values f_j(x) of canonical SMILES, ``[n, m]`` (official `problem/molecules/evaluator.py`)."""
        fns = [self._objective(g) for g in self.goals]
        raw = np.array([[fn(s) for fn in fns] for s in values], dtype=float)  # [n, m]
        return raw.reshape(len(values), self.m)

    def normalize(self, raw: np.ndarray) -> np.ndarray:
        """Map raw values into [0, 1] with the official normalisers (identity otherwise)."""
        raw = np.asarray(raw, dtype=float).reshape(-1, self.m)
        out = raw.copy()
        for j, g in enumerate(self.goals):
            fn = NORMALIZERS.get(g)
            if fn is not None:
                out[:, j] = fn(raw[:, j])
            elif raw.size and (raw[:, j].min() < -1e-9 or raw[:, j].max() > 1 + 1e-9):
                msg = f"objective {g!r} has no normaliser and values outside [0, 1]"
                if self.strict:
                    raise ValueError(msg)
                logger.warning(msg)
        return out

    def transform(self, raw: np.ndarray) -> np.ndarray:
        """Minimisation-form t_j = norm_j(f_j) for min goals, 1 − norm_j(f_j) for max goals, ``[n, m]``
        (official `problem/molecules/evaluator.py`)."""
        norm = self.normalize(raw)
        flip = np.array([d == "max" for d in self.directions])
        return np.where(flip[None, :], 1.0 - norm, norm)


def fitness(t: np.ndarray) -> np.ndarray:
    """Scalar fitness F = Σ_j (1 − t_j) = m − Σ_j t_j (official code's ``total``); higher is better."""
    t = np.asarray(t, dtype=float)
    return t.shape[-1] - t.sum(axis=-1)


def paper_problem(
    oracles: dict[str, Callable[[str], float]] | None = None, oracle_dir: str = "oracle"
) -> MoleculeProblem:
    """The paper's 5-objective task: SA↓, DRD2↓, QED↑, GSK3β↓, JNK3↑ (repo `problem/molecules/config.yaml`)."""
    return MoleculeProblem(
        goals=["sa", "drd2", "qed", "gsk3b", "jnk3"],
        directions=["min", "min", "max", "min", "max"],
        oracles=dict(oracles or {}),
        oracle_dir=oracle_dir,
        task="Design drug-like molecules that satisfy all the requirements below.",
    )


def toy_problem(representation: Literal["smiles", "selfies"] = "selfies") -> MoleculeProblem:
    """The CPU toy's 3 RDKit objectives: QED↑, SA↓, Tanimoto to celecoxib↑ (our construction, CPU toy)."""
    return MoleculeProblem(
        goals=["qed", "sa", "celecoxib_sim"],
        directions=["max", "min", "max"],
        representation=representation,
        task="Propose new molecules similar to celecoxib that are drug-like and easy to make.",
    )


def load_init_smiles(path: str) -> list[str]:
    """The initial population of the paper stage (``method.init_file``), every SMILES checked.

    Reads a SMILES file (one molecule per line, the SMILES first and an optional id after
    whitespace; ``#`` comments) or a ZINC250k-style CSV with a ``smiles`` column (whose values
    carry a trailing newline, stripped here).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: no molecule, or a SMILES RDKit cannot parse (the first one, with its line).
    """
    import csv

    from rdkit import Chem, RDLogger

    if not os.path.isfile(path):
        raise FileNotFoundError(f"method.init_file {path!r} not found (a SMILES or ZINC CSV file)")
    with open(path, newline="") as fh:
        if path.endswith(".csv"):
            reader = csv.DictReader(fh)
            if "smiles" not in (reader.fieldnames or []):
                raise ValueError(f"{path}: a CSV needs a 'smiles' column, got {reader.fieldnames}")
            rows = [(i + 2, r["smiles"].strip()) for i, r in enumerate(reader)]
        else:
            rows = [(i + 1, ln.split()[0]) for i, ln in enumerate(fh) if ln.strip()]
    rows = [(n, smi) for n, smi in rows if smi and not smi.startswith("#")]
    if not rows:
        raise ValueError(f"method.init_file {path!r} holds no SMILES")
    RDLogger.DisableLog("rdApp.*")
    try:
        for n, smi in rows:
            if Chem.MolFromSmiles(smi) is None:
                raise ValueError(f"{path}:{n}: RDKit cannot parse SMILES {smi!r}")
    finally:
        RDLogger.EnableLog("rdApp.*")
    return [smi for _, smi in rows]


def load_seed_smiles(path: str | None = None) -> list[str]:
    """Seed SMILES for the toy (``methods/mcce/data/toy_seeds.smi``), one per line (engineering)."""
    if path is None:
        path = os.path.join(os.path.dirname(__file__), "data", "toy_seeds.smi")
    with open(path) as fh:
        return [ln.split()[0] for ln in fh if ln.strip() and not ln.startswith("#")]


def load_nci_smiles(limit: int | None = None) -> list[str]:
    """SMILES of the ~5k NCI molecules shipped with RDKit (``RDDataDir/NCI/first_5K.smi``; engineering)."""
    from rdkit.Chem import RDConfig

    path = os.path.join(RDConfig.RDDataDir, "NCI", "first_5K.smi")
    out = []
    with open(path) as fh:
        for ln in fh:
            parts = ln.split()
            if parts:
                out.append(parts[0])
            if limit is not None and len(out) >= limit:
                break
    return out
