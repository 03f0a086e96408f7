"""The service's state: tables (:mod:`.schema`), what the service writes and reads (:mod:`.store`), read-only SQL."""
