"""The rater app (``crisscross serve``): the CxC and ECCV Caption annotation interfaces served
locally, one batch at a time, with judgments in a database ``annotate`` imports (format ``store``).

The database (raters, tasks, assignments, judgments) is ``crisscross.annotate.store``, below this
package, so ``annotate`` reads it without the web stack.  ``examples`` (worked examples and scale
labels the page shows), ``security`` (tokens, CSRF, request limits), ``assets`` (the page's own
HTML, CSS and JS: nothing is loaded from elsewhere), ``app`` (the ASGI app).
"""
