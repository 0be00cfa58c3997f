"""Test doubles for the step and the loop: a target that serves chosen logits (`scripted_target`) and
a drafter that proposes what a script says (`scripted_drafter`). Nothing in spectui imports them;
tests and scripts do."""
