"""Pixel sequences (tsrnn.lab.data.digits): the IDX reader on files the test writes, MNIST's splits,
scikit-learn's 8x8 digits, the fixed permutation, and clear errors for missing or bad files."""
import gzip
import struct

import numpy as np
import pytest
import torch

from tsrnn.lab.data import digits


def write_idx(path, array, type_byte=0x08, compress=False):
    array = np.asarray(array)
    raw = bytes([0, 0, type_byte, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    raw += array.astype(np.dtype(digits._IDX_TYPES[type_byte])).tobytes()
    path.write_bytes(gzip.compress(raw) if compress else raw)
    return path


def test_read_idx_round_trip(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    assert np.array_equal(digits.read_idx(write_idx(tmp_path / "a", images)), images)
    assert np.array_equal(digits.read_idx(write_idx(tmp_path / "a.gz", images, compress=True)), images)
    floats = np.array([[1.5, -2.0]], dtype=np.float32)
    assert np.array_equal(digits.read_idx(write_idx(tmp_path / "f", floats, type_byte=0x0D)), floats)


def one_line_error(error, *parts):
    """The ValueError/FileNotFoundError text, checked to be one line holding every part."""
    text = str(error.value)
    assert "\n" not in text and all(str(part) in text for part in parts), text
    return text


def test_read_idx_rejects_bad_files(tmp_path):
    (tmp_path / "text").write_text("not an idx file")
    with pytest.raises(ValueError, match="not an IDX file") as err:
        digits.read_idx(tmp_path / "text")
    one_line_error(err, tmp_path / "text")
    path = write_idx(tmp_path / "short", np.zeros((4, 2, 2), np.uint8))
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ValueError, match="needs") as err:
        digits.read_idx(path)
    one_line_error(err, path)
    (tmp_path / "header").write_bytes(bytes([0, 0, 8, 3, 0, 0]))
    with pytest.raises(ValueError, match="truncated: its header needs 16 bytes") as err:
        digits.read_idx(tmp_path / "header")
    one_line_error(err, tmp_path / "header")


def test_read_idx_rejects_bad_gzip_files(tmp_path):
    (tmp_path / "junk.gz").write_bytes(b"junk, not gzip")
    with pytest.raises(ValueError, match="not a readable gzip file") as err:
        digits.read_idx(tmp_path / "junk.gz")
    one_line_error(err, tmp_path / "junk.gz")
    path = write_idx(tmp_path / "cut.gz", np.zeros((40, 2, 2), np.uint8), compress=True)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ValueError, match="not a readable gzip file") as err:
        digits.read_idx(path)
    one_line_error(err, path)


def fake_mnist(directory, n_train=10_006, n_test=7, side=2, compress=False):
    rng = np.random.default_rng(0)
    directory.mkdir(exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        images, labels = digits.MNIST_FILES[split]
        suffix = ".gz" if compress else ""
        write_idx(directory / (images + suffix), rng.integers(0, 256, (n, side, side)), compress=compress)
        write_idx(directory / (labels + suffix), rng.integers(0, 10, n), compress=compress)
    return directory


@pytest.mark.parametrize("compress", [False, True])
def test_load_mnist_splits(tmp_path, compress):
    splits = digits.load_mnist(fake_mnist(tmp_path / "mnist", compress=compress))
    assert [len(y) for _, y in (splits.train, splits.valid, splits.test)] == [6, 10_000, 7]
    assert splits.steps == 4
    x, y = splits.train
    assert x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1 and y.dtype == torch.int64
    raw = digits.read_idx(tmp_path / "mnist" / ("train-images-idx3-ubyte" + (".gz" if compress else "")))
    assert torch.allclose(x[0] * 255, torch.from_numpy(raw[0].reshape(-1).astype(np.float32)))  # row by row


def test_missing_mnist_file_is_named(tmp_path):
    directory = fake_mnist(tmp_path / "mnist")
    (directory / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="t10k-labels-idx1-ubyte"):
        digits.load_mnist(directory)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        digits.load_mnist(tmp_path / "nowhere")


@pytest.mark.parametrize("fault, message", [
    ("count", "holds 5 labels but {images} holds 7 images"),
    ("range", "label 12 at index 3 is outside the classes 0..9 (2 of the 7 labels are)"),
    ("negative", "label -1 at index 0 is outside the classes 0..9"),
    ("float_labels", "holds >f4 of shape (7,), not labels"),
    ("flat_images", "holds uint8 of shape (7, 4), not images"),
    ("empty", "holds no images: the test split is empty")])
def test_bad_mnist_test_files_are_named(tmp_path, fault, message):
    directory = fake_mnist(tmp_path / "mnist")
    images, labels = (directory / name for name in digits.MNIST_FILES["test"])
    if fault == "count":
        write_idx(labels, np.zeros(5))
    elif fault == "range":
        write_idx(labels, [0, 1, 2, 12, 4, 5, 10])
    elif fault == "negative":
        write_idx(labels, [-1, 1, 2, 3, 4, 5, 6], type_byte=0x09)
    elif fault == "float_labels":
        write_idx(labels, np.zeros(7), type_byte=0x0D)
    elif fault == "flat_images":
        write_idx(images, np.zeros((7, 4)))
    else:
        write_idx(images, np.zeros((0, 2, 2)))
        write_idx(labels, np.zeros(0))
    with pytest.raises(ValueError) as err:
        digits.load_mnist(directory)
    named = images if fault in ("flat_images", "empty") else labels
    one_line_error(err, named, message.format(images=images))


def test_mnist_training_files_need_more_than_the_validation_images(tmp_path):
    directory = fake_mnist(tmp_path / "mnist", n_train=10_000)
    with pytest.raises(ValueError, match="leaves the train split empty") as err:
        digits.load_mnist(directory)
    one_line_error(err, directory / "train-images-idx3-ubyte", "holds 10000 images", "more than 10,000")


def test_bad_mnist_data_is_one_line_from_the_cli(tmp_path, capsys):
    from tsrnn.lab import cli
    directory = fake_mnist(tmp_path / "mnist", compress=True)
    (directory / "train-labels-idx1-ubyte.gz").write_bytes(b"junk")
    argv = ["train", "--task", "pixels", "--data", str(directory), "--max-steps", "1", "--quiet",
            "--out", str(tmp_path / "run")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tsrnn train: error: ") and "train-labels-idx1-ubyte.gz" in err[0]
    write_idx(directory / "train-labels-idx1-ubyte.gz", np.full(10_006, 12), compress=True)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "label 12 at index 0 is outside the classes 0..9" in err[0]


def test_small_digits_and_permutation():
    pytest.importorskip("sklearn")
    splits = digits.load_small_digits()
    assert [len(y) for _, y in (splits.train, splits.valid, splits.test)] == [1297, 250, 250]
    assert splits.steps == 64 and splits.train[0].max() == 1.0
    permuted = splits.permuted(0)
    assert not torch.equal(permuted.train[0], splits.train[0]) and torch.equal(permuted.train[1], splits.train[1])
    assert torch.equal(permuted.train[0].sort(dim=1).values, splits.train[0].sort(dim=1).values)
    assert torch.equal(splits.permuted(0).test[0], permuted.test[0])        # one fixed permutation
