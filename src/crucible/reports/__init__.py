"""Reports over jobs: tables, the HTML report and the local web viewer."""
