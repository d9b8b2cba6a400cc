"""Charts: Plotly figures from query rows, the chart forms (state in the URL) and the chart pages."""
