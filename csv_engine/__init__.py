"""The fast CSV ingestion engine: CsvExampleGen's examples and splits from worker processes, without Beam."""
