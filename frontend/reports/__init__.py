"""Reports for managers (costs, models, spend, model choice) and the tables they show and export."""
