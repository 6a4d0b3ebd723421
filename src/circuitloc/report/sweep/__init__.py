"""What the controlled experiment's seeds say together: summaries, paired comparisons, verdicts, their
minimum detectable effects and stability, the parameter-count check, and the sentences written from them."""
