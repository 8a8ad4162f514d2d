"""georl_paper reads DOCCI from its official files (the hub id is a loading script that datasets
>= 4 refuses) through ``methods.georl.paper.image_prompts``."""

from __future__ import annotations

import shutil

import pytest

from common.config import validate
from common.registry import compose
from tests.artifact_samples import sample_for

DOCCI = sample_for("google/docci")


def _spec(*overrides: str):
    return validate(compose(["experiment=georl_paper", *overrides])).method.train_data


def test_paper_reads_docci_official_files():
    from methods.georl.paper import INSTRUCTION, image_prompts

    ds = image_prompts(_spec(f"method.train_data.path={DOCCI['dir']}"))
    assert ds["example_id"] == ["train_00000", "train_00001"]  # the train split only
    assert ds["description"][1].startswith("A blue field")
    img = ds[0]["image"]
    assert img.size == (16, 12) and img.getpixel((8, 6))[0] > 150  # the red square's image
    turn = ds[0]["prompt"][0]
    assert turn["role"] == "user" and turn["content"][1]["text"] == INSTRUCTION


def test_hub_id_names_the_official_files_and_the_path():
    from methods.georl.paper import image_prompts

    spec = _spec()
    assert spec.hub_id == "google/docci" and not spec.path  # the preset's default
    with pytest.raises(ValueError) as err:
        image_prompts(spec)
    msg = str(err.value)
    for part in (
        "https://storage.googleapis.com/docci/data/docci_descriptions.jsonlines",
        "https://storage.googleapis.com/docci/data/docci_images.tar.gz",
        "method.train_data.path=",
        "loading-script",
    ):
        assert part in msg


def test_missing_images_fail_before_loading(tmp_path):
    from methods.georl.paper import image_prompts

    shutil.copy(DOCCI["dir"] / "docci_descriptions.jsonlines", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"2 of 2 DOCCI train images are missing.*tar.gz"):
        image_prompts(_spec(f"method.train_data.path={tmp_path}"))
    (tmp_path / "docci_descriptions.jsonlines").write_text('{"split": "train"}\n')
    with pytest.raises(ValueError, match=r":1 lacks \['image_file', 'description'\]"):
        image_prompts(_spec(f"method.train_data.path={tmp_path}"))
