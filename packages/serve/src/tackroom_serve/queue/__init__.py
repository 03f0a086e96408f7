"""Running rollouts: a batch's plugins and runtime (:mod:`.runner`), the dispatcher that starts them
(:mod:`.worker`)."""
