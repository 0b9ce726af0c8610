"""The fast Parquet ingestion engine: ParquetExampleGen's examples and splits from worker processes, without Beam."""
