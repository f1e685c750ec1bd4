"""What people and scripts see: the click CLI, tables and progress, HTML reports, metrics."""
