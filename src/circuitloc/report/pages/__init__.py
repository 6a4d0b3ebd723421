"""Pages written from a run: the report's landing page and the README's result sections."""
