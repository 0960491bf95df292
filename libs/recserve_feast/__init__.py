"""The Feast feature repository: the schema the features service serves and
the pipelines publish into (entities, feature views, push sources, stores)."""
