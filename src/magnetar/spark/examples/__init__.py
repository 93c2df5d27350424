"""Example pipelines on the ``magnetar`` data source (docs/spark.md); the Spark image runs them
on Kubernetes (spark-on-k8s/)."""
