"""Rendering of the merged compatibility report (JSON, HTML, Markdown, JUnit)."""

from compat.harness.report.build import SECTIONS, build_report, harness_version, machine_info
from compat.harness.report.render import (
    figure_tables,
    render_html,
    render_markdown,
    view_model,
    write_reports,
)

__all__ = [
    "SECTIONS",
    "build_report",
    "figure_tables",
    "harness_version",
    "machine_info",
    "render_html",
    "render_markdown",
    "view_model",
    "write_reports",
]
