"""The HTTP side: auth, the route table, request bodies and errors, the OpenAPI document, the server."""
