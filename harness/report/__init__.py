"""The regression table: results files read (core.records), worked out (analysis, baseline) and
rendered (render, templates/)."""
