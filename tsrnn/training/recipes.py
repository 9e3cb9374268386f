"""``tsrnn train --recipe NAME``: the seeds' training settings, one flag away.

A recipe fills every option the user did not give with the value the seed (or its authors'
code) used; options given on the command line win. Each recipe names the data it needs
(``--data``); the sizes are the seeds', for a GPU. Where a seed does not state a value, the
recipe keeps tsrnn's default and ``NOTES`` says so.
"""
from __future__ import annotations

RECIPES: dict[str, dict[str, dict]] = {
    # Mahto et al. (seed 000 §3.1.1) via AWD-LSTM, as the authors' run.sh trains PTB
    # (train_mts.py --batch_size 20 --dropouti 0.4 --dropouth 0.25 --seed 141 --epoch 1000).
    "seed000": {
        "lm": {"cell": "mts", "emsize": 400, "nhid": "1150,1150,400", "dropout": 0.4, "dropouth": 0.25,
               "dropouti": 0.4, "dropoute": 0.1, "wdrop": 0.5, "alpha": 2.0, "beta": 1.0, "mts_alpha": 0.56,
               "freeze": "all", "batch_size": 20, "bptt": 70, "random_bptt": True, "optimizer": "sgd", "lr": 30.0,
               "clip": 0.25, "weight_decay": 1.2e-6, "nonmono": 5, "epochs": 1000, "seed": 141},
        # seed 000 §3.1.2 / run_dyckn.py: Adam 1e-4, clip 1, stateful chunks of 200, MSELoss(sum)
        "dyck": {"cell": "mts", "nhid": "256", "mts_alpha": 1.5, "freeze": "all", "batch_size": 32,
                 "optimizer": "adam", "lr": 1e-4, "clip": 1.0, "epochs": 2000, "chunk": 200, "dyck_loss": "sum",
                 "dyck_size": "10000,2000,5000"},
    },
    # Salton & Kelleher (seed 001 §5), PTB: 2 x 650, SGD lr 1 halved each epoch after 12, clip 5,
    # dropout 0.5, batch 32, sentences of at most 35 in corpus order, early stopping after 10.
    "seed001": {
        "averaging-lm": {"emsize": 650, "nhid": "650", "nlayers": 2, "dropout": 0.5, "batch_size": 32, "bptt": 35,
                         "order": "corpus", "optimizer": "sgd", "lr": 1.0, "lr_decay_after": 12,
                         "lr_decay_factor": 2.0, "clip": 5.0, "patience": 10, "epochs": 100},
    },
    # Chien et al. (seed 002 §4.1): batch 128, 128 units, RMSprop(1e-3, alpha 0.9), 100K training and
    # 10K validation sequences, T = 200 (also 500, 1000); stop when both accuracies reach 0.999.
    "seed002": {
        "copy": {"cell": "plstm", "nhid": "128", "delay": 200, "batch_size": 128, "optimizer": "rmsprop",
                 "lr": 1e-3, "clip": 0.0, "copy_size": "100000,10000", "stop_accuracy": 0.999, "epochs": 1000},
        # seed 002 §5.4, A.2: 110 units; data and training as Neil et al.'s freq_task.py / a_freq_task.sh
        # (Adam 1e-3, batch 32, 5,000 fresh training and 500 test sequences per epoch, 70 epochs).
        "freq": {"cell": "plstm", "nhid": "110", "batch_size": 32, "optimizer": "adam", "lr": 1e-3, "clip": 0.0,
                 "freq_size": "5000,500", "epochs": 70},
        # seed 002 §4.2: Adam 1e-3 (its default optimizer), 256 units (also 512); MNIST with --data DIR.
        "pixels": {"cell": "plstm", "nhid": "256", "batch_size": 128, "optimizer": "adam", "lr": 1e-3, "clip": 0.0,
                   "epochs": 100},
        # seed 002 §4.4: 20 epochs, dropout 0.2, 100-d embeddings (--embeddings glove.6B.100d.txt); the
        # task picks 128 units and lr 1e-3 for LSTM/chrono, 154 units and 5e-4 for the pLSTM.
        "imdb": {"cell": "plstm", "batch_size": 64, "optimizer": "adam", "clip": 0.0, "dropout": 0.2, "emsize": 100,
                 "epochs": 20},
    },
    # Jacques & Sederberg (seed 004): Brown, words seen more than 5 times in the whole corpus,
    # 5 inputs, 30-d features, 100 hidden, SGD lr 1e-3, 20 epochs, evaluated on the 200k words after training.
    "seed004": {
        "mlp-lm": {"context": "tilt", "n": 5, "emsize": 30, "nhid": "100", "vocab_from": "all", "optimizer": "sgd",
                   "lr": 1e-3, "epochs": 20},
    },
}

NOTES = {
    "seed000": "lm: the authors' seed 141; --cell lstm trains their baseline. dyck: batch 32 as the seed's text "
               "(run_dyckn.py defaults to 128).",
    "seed001": "the paper clips the gradient norm 'normalized by the mini-batch size' at 5; tsrnn's loss is a mean "
               "over targets, so --clip 5 clips that mean's gradient. WikiText-2: --lr-decay-after 14 "
               "--lr-decay-factor 1.15 --emsize 1000 --nhid 1000 --dropout 0.65.",
    "seed002": "the paper does not state gradient clipping (none here); --variable --delay-min 200 --delay 500 "
               "(or 1000) is the variable copy task. freq: --async, or --resolution 1 / 0.1, each with or "
               "without --time-input, are the columns and rows of its Table 3; Neil et al. clip each step's "
               "hidden-state gradient at 10 (Lasagne's grad_clipping), which tsrnn does not do. pixels: the paper "
               "states neither batch size nor epochs (128 and 100 here); --permute is pMNIST. imdb: batch size "
               "unstated (64 here); without --embeddings the embedding is trained, not GloVe.",
    "seed004": "the paper does not state the batch size; tsrnn's default (32) is kept. Experiment 2: --ahead K; "
               "Experiment 4: --drop-taus 0 (0,1 / 0,1,2 / 0,1,2,3).",
}


def task(args) -> str:
    """The task ``args`` asks for: ``--task``, else the recipe's first task, else "lm"."""
    if not getattr(args, "recipe", None):
        return args.task or "lm"
    presets = RECIPES[args.recipe]
    name = args.task or next(iter(presets))
    if name not in presets:
        raise ValueError(f"--recipe {args.recipe} has no setting for --task {name}; it sets {list(presets)}")
    return name


def apply(args) -> None:
    """Resolve ``args.task`` and fill the options ``args`` leaves unset (None) from ``args.recipe``."""
    args.task = task(args)
    if not getattr(args, "recipe", None):
        return
    for key, value in RECIPES[args.recipe][args.task].items():
        if getattr(args, key, None) in (None, False):
            setattr(args, key, value)
