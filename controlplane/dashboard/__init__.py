"""The operator's dashboard: server-rendered pages that read the REST API and the run's
websocket from the browser. Views only gather what a page shows; the API does the writing."""
