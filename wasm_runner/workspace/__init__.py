"""Session directories: layout and usage, path-confined file operations, disk quotas."""
