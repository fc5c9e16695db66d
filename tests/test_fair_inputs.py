"""Fair inputs: no observation a learner gets shows two layouts whose best sets differ the same way.

Over 2,000 generated layouts (train and test together), per observation mode of the comparison:
the state vector (``observation_mode="state"``), the dict observation (image and state vector, the
default ``observation_mode="dict"``) and the scene prompt a language model reads. The front image
alone is not such a mode (its documentation says what it cannot see); the test checks that the
check itself catches its aliasing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from agents import ceiling as K  # noqa: E402

TRAIN_LAYOUTS, TEST_LAYOUTS = 1500, 500


@pytest.fixture(scope="module")
def layouts() -> K.Dataset:
    """The resets seeded 0..1499 of the train scenario and 0..499 of the test one, with their images."""
    return K.concat([K.build_dataset("train", TRAIN_LAYOUTS, images=True),
                     K.build_dataset("test", TEST_LAYOUTS, images=True)])


@pytest.mark.parametrize("view", ["state", "dict", "text"])
def test_learner_observations_separate_every_layout(layouts, view):
    result = K.aliasing(layouts, view)
    assert result.rows == TRAIN_LAYOUTS + TEST_LAYOUTS
    # equal observations only where the layout is the same (a layout drawn twice): the observation determines the
    # layout, so layouts whose best sets differ never look alike
    assert result.observations == result.layouts, result
    assert (result.aliased_rows, result.conflicting_groups, result.conflicting_rows) == (0, 0, 0), result
    assert result.information_ceiling == 1.0


def test_image_alone_aliases_layouts_whose_best_sets_differ(layouts):
    # the check above would catch an unfair mode: the 84x84 front image alone shows no speed and loses people
    # behind others and 1 m steps, so different layouts with different best sets give the same image
    result = K.aliasing(layouts, "image")
    assert result.observations < result.layouts
    assert result.conflicting_groups > 0 and result.conflicting_rows >= 2 * result.conflicting_groups
    assert result.information_ceiling < 1.0
