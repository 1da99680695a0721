import pytest

from compat.shared.cell_spec import CellSpec, spec_from_environment


@pytest.fixture(scope="session")
def cell_spec() -> CellSpec:
    return spec_from_environment()


@pytest.fixture(scope="session")
def model_dir(cell_spec: CellSpec) -> str:
    return cell_spec.model_dir
