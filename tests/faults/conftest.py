import os

import pytest


@pytest.fixture(scope="session")
def model_dir() -> str:
    return os.environ["COMPAT_MODEL_DIR"]
