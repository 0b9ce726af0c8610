"""Fast CSV ingestion: CsvExampleGen with an executor that writes the same examples without Beam."""
