"""The sensors service: rolling mean temperature and rise alerts per sensor."""
