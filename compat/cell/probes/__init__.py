"""The probes: pytest suites the cell runner runs inside the cell's venv, one test marked
`@pytest.mark.probe` per contract."""
