"""IDE pages: one module per page, each registering its path with Dash pages."""
