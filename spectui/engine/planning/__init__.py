"""Planning K: each cycle's draft length from measured acceptance and costs (`autodraft`), the
costs it learns (`passcosts`), and the guard against a slower reply (`pays`)."""
