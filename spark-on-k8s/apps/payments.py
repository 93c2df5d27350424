"""spark-submit's main file for the example pipeline in the Spark image
(/opt/spark-apps/payments.py): the code is magnetar.spark.examples.payments."""

from magnetar.spark.examples.payments import main

main()
