"""The GPT-J benchmark (GPT-J 6B summarising CNN/DailyMail): our model, beam search and what drives them."""
