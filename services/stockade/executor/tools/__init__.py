"""The executor's tools (read_file, file_write, file_edit, glob_files, grep_files, run_bash)."""
