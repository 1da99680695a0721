"""Rendering of the merged compatibility report (JSON, HTML, Markdown, JUnit)."""

from compat.harness.report.render import (
    build_report,
    figure_tables,
    harness_version,
    machine_info,
    render_html,
    render_markdown,
    view_model,
    write_reports,
)

__all__ = [
    "build_report",
    "figure_tables",
    "harness_version",
    "machine_info",
    "render_html",
    "render_markdown",
    "view_model",
    "write_reports",
]
