"""mcce_paper reads its local formats: the initial ZINC SMILES (``method.init_file``, through
``methods.mcce.problems.load_init_smiles``) and the TDC oracle files (``method.oracle_dir``,
through ``paper_problem``), scikit-learn pickles tied to the version that wrote them."""

from __future__ import annotations

import pickle

import pytest

from common.config import validate
from common.registry import compose
from tests.artifact_samples import sample_for

ORACLES = sample_for("format:tdc_oracle_pkl")
ZINC = sample_for("format:zinc_smiles")


def _method(*overrides: str):
    return validate(compose(["experiment=mcce_paper", *overrides])).method


@pytest.mark.parametrize("name", ["zinc250k_random1.smi", "250k_rndm_zinc_drugs_clean_3.csv"])
def test_init_file_reads_zinc_smiles(name):
    from methods.mcce.problems import load_init_smiles

    rc = _method(f"method.init_file={ZINC['dir'] / name}")
    smiles = load_init_smiles(rc.init_file)
    want = {
        "zinc250k_random1.smi": [
            "CC(C)Cc1ccc(C(C)C(=O)O)cc1",
            "O=C(O)c1ccccc1O",
            "CN1CCC[C@H]1c1cccnc1",
        ],
        "250k_rndm_zinc_drugs_clean_3.csv": ["CC(=O)Oc1ccccc1C(=O)O", "c1ccc2ccccc2c1"],
    }
    assert smiles == want[name]  # ids and the CSV's trailing newlines are not part of a SMILES


def test_init_file_names_the_first_bad_smiles(tmp_path):
    from methods.mcce.problems import load_init_smiles

    bad = tmp_path / "init.smi"
    bad.write_text("CCO id1\nC1CC id2\nnot_a_smiles id3\n")
    with pytest.raises(ValueError, match=r"init.smi:2: RDKit cannot parse SMILES 'C1CC'"):
        load_init_smiles(str(bad))


def test_oracle_dir_scores_the_five_objectives():
    from methods.mcce.problems import paper_problem

    rc = _method(f"method.oracle_dir={ORACLES['dir']}")
    prob = paper_problem(oracle_dir=rc.oracle_dir)
    raw = prob.evaluate([prob.canonicalize("CCOc1ccccc1", "smiles")])
    assert prob.goals == ["sa", "drd2", "qed", "gsk3b", "jnk3"]
    assert raw.shape == (1, 5) and ((raw[:, 1:] >= 0) & (raw[:, 1:] <= 1)).all()


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"\x80\x02csklearn.ensemble.forest\nRandomForestClassifier\nq\x00)\x81q\x01.", "forest"),
        (b"\x80\x02csklearn.svm.classes\nSVC\nq\x00)\x81q\x01.", "svm.classes"),
        (b"<html>403</html>", "invalid load key"),
    ],
)
def test_oracle_from_another_scikit_learn_says_so(tmp_path, payload, match):
    from methods.mcce.problems import load_tdc_oracle

    (tmp_path / "gsk3b_current.pkl").write_bytes(payload)  # an old release's module paths
    with pytest.raises(ValueError, match=rf"cannot be unpickled by scikit-learn .*{match}"):
        load_tdc_oracle("gsk3b", str(tmp_path))


def test_unfitted_oracle_is_refused(tmp_path):
    from sklearn.ensemble import RandomForestClassifier

    from methods.mcce.problems import load_tdc_oracle

    (tmp_path / "jnk3_current.pkl").write_bytes(pickle.dumps(RandomForestClassifier()))
    with pytest.raises(ValueError, match="unfitted RandomForestClassifier"):
        load_tdc_oracle("jnk3", str(tmp_path))
