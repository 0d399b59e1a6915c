"""Loss problems of our own in KernelBench's format (level 1's CrossEntropyLoss, HuberLoss, KLDivLoss,
TripletMarginLoss and MSELoss families, small): the functional and module spellings, every reduction, the options
the built-in writes (beta / delta, log_target, ignore_index, p, swap, margin) and edge values (targets that are
exactly 0 for kl_div's xlogy, ignored rows, differences on both sides of smooth L1's beta). `LOSS_CASES` are written
with nothing kept in PyTorch; `KEPT_CASES` stay in PyTorch, each with the reason's words."""

from __future__ import annotations

from tests.kernelbench_cases import problem

PT = "predictions, targets"
F = "torch.nn.functional"


def _pt(forward: str, n: int = 24, d: int = 37, ctor: str = "pass", init: str = "[]") -> str:
    """A loss of same-shaped predictions and targets, differences on both sides of 1 (and of 0.5)."""
    return problem(forward=forward, args=PT, ctor=ctor, init=init,
                   inputs=f"[torch.randn({n}, {d}) * 2.0, torch.randn({n}, {d})]")


# KL divergence: probabilities (softmax rows), a tenth of the targets exactly 0 (xlogy(0, 0) is 0)
_KL_INPUTS = ("[torch.rand(24, 37).softmax(dim=-1), torch.where(torch.rand(24, 37) < 0.1, 0.0, "
              "torch.rand(24, 37)).softmax(dim=-1) * (torch.rand(24, 37) > 0.1)]")
# logits and int64 class targets, a fifth of them ignore_index (-100, the default)
_CE_INPUTS = "[torch.randn(48, 37) * 3.0, torch.where(torch.rand(48) < 0.2, -100, torch.randint(0, 37, (48,)))]"
_TRIPLET = "anchor, positive, negative"
_TRIPLET_INPUTS = "[torch.randn(24, 33), torch.randn(24, 33), torch.randn(24, 33) * 0.3]"

LOSS_CASES = {
    # KernelBench level1/95: F.cross_entropy(predictions, targets), mean over the rows not ignored
    "cross_entropy": problem(forward=f"return {F}.cross_entropy(predictions, targets)", args=PT,
                             inputs=_CE_INPUTS),
    "cross_entropy_module": problem(
        forward="return (self.s(predictions, targets), self.n(predictions, targets) * 2.0, "
                "self.i(predictions, targets))", args=PT,
        inputs="[torch.randn(48, 37) * 3.0, torch.randint(0, 6, (48,))]",  # class 3 (ignored by self.i) often
        ctor="self.s = nn.CrossEntropyLoss(reduction='sum'); self.n = nn.CrossEntropyLoss(reduction='none'); "
             "self.i = nn.CrossEntropyLoss(ignore_index=3)"),
    # level1/96: smooth_l1_loss (beta 1), and beta 0.5, beta 0 (l1), reduction sum / none, HuberLoss (delta 0.7)
    "smooth_l1": _pt(f"return ({F}.smooth_l1_loss(predictions, targets), "
                     f"{F}.smooth_l1_loss(predictions, targets, beta=0.5, reduction='sum'), "
                     f"{F}.smooth_l1_loss(predictions, targets, reduction='none', beta=0.0), "
                     "self.huber(predictions, targets), "
                     f"{F}.huber_loss(predictions, targets, reduction='none') + 1.0)",
                     ctor="self.huber = nn.HuberLoss(delta=0.7)"),
    # level1/98: kl_div(log(p), q, reduction='batchmean'), and mean / sum / none, log_target, the module
    "kl_div": problem(forward=f"return ({F}.kl_div(torch.log(predictions), targets, reduction='batchmean'), "
                              f"{F}.kl_div(predictions.log(), targets, reduction='sum'), "
                              f"{F}.kl_div(predictions.log(), targets, reduction='none'), "
                              f"{F}.kl_div(predictions.log(), (targets + 1e-3).log(), reduction='mean', "
                              "log_target=True), self.kl(torch.log(predictions), targets))",
                      args=PT, inputs=_KL_INPUTS, ctor="self.kl = nn.KLDivLoss(reduction='batchmean')"),
    # level1/99: TripletMarginLoss(margin), and p=1 with swap, reduction none, the functional spelling
    "triplet": problem(forward="return (self.loss_fn(anchor, positive, negative), "
                               "self.l1(anchor, positive, negative), "
                               f"{F}.triplet_margin_loss(anchor, positive, negative, margin=0.5, reduction='none'))",
                       args=_TRIPLET, inputs=_TRIPLET_INPUTS, params="margin", init="[1.0]",
                       ctor="self.loss_fn = nn.TripletMarginLoss(margin=margin); "
                            "self.l1 = nn.TripletMarginLoss(p=1, swap=True, reduction='sum')"),
    # level1/94's family through the functions and modules themselves
    "mse_l1": _pt(f"return ({F}.mse_loss(predictions, targets), self.mse(predictions, targets), "
                  f"{F}.l1_loss(predictions, targets, reduction='sum'), "
                  f"torch.sigmoid({F}.mse_loss(predictions, targets, reduction='none')))",
                  ctor="self.mse = nn.MSELoss(reduction='sum')"),
}

KEPT_CASES = {
    "cross_entropy_weight": (problem(forward="return self.loss(predictions, targets)", args=PT, inputs=_CE_INPUTS,
                                     ctor="self.loss = nn.CrossEntropyLoss(weight=torch.rand(37))"),
                             "with a weight stays in PyTorch"),
    "cross_entropy_smoothing": (problem(forward=f"return {F}.cross_entropy(predictions, targets, "
                                                "label_smoothing=0.1)", args=PT, inputs=_CE_INPUTS),
                                "label_smoothing stays in PyTorch"),
    "cross_entropy_probs": (problem(forward=f"return {F}.cross_entropy(predictions, targets.softmax(-1))",
                                    args=PT, inputs="[torch.randn(8, 5), torch.randn(8, 5)]"),
                            "class probabilities as targets stays in PyTorch"),
    "mse_broadcast": (problem(forward=f"return {F}.mse_loss(predictions, targets)", args=PT,
                              inputs="[torch.randn(8, 5), torch.randn(5)]"),
                      "another shape (broadcast) stays in PyTorch"),
}
