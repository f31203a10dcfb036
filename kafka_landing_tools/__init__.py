"""What develops, demonstrates and measures kafka_landing: the local stack (devstack), the demo
and the benchmark. They drive the product as a user does; the product never imports them."""
