"""Running the work: planning topics, the per-partition task and its retries, the runner that
owns partitions (one-shot or follow, with or without a group), and the diff driver."""
