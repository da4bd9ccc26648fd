"""`switchyard bakeoff`: choose a runtime by measurement (eliminate, comparable,
measure, production checks, report), every candidate driven through the gateway."""
