"""The paper's experiments on partitioned execution and memory (see ``docs/paper_experiments.rst``)."""
