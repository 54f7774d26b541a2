"""The row template: softmax and log-softmax over the trailing axis, three passes per row."""
