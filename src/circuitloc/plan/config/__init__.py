"""The plan's config: loading and merging it, its schema's checks beyond the schema, the one step that
prepares it, the views the rules read, the user's files, hub names, the checkout's files, and the sweep's
expansion into toys with its power check."""
